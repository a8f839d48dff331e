"""The reference worker: ``python -m taskforge_client.worker`` (or ``taskforge-worker``).

Modules, in the order a task meets them: ``config`` (every setting declared
once), ``handlers`` (which function runs a task), ``job`` (what a handler
gets), ``flights`` (the tasks held), ``runner`` (claim loop and thread pool),
``outcome`` (a return or raise as an ack or nack), ``completer`` (batched
acks and nacks), ``heartbeats`` (leases kept alive), ``logs``, ``cli``.

Nothing is imported here, so a handler importing ``taskforge_client.worker.job``
does not start the machinery.
"""
