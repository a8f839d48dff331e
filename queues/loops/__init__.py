"""The background loops, one module each, each with a ``run_once()`` that returns what it did.

* ``scheduler``: due retries promoted, delayed tasks into the lanes on time.
* ``dispatcher``: every unpaused queue's Redis lane refilled from Postgres.
* ``watchdog``: lapsed leases expired (failed attempts), old finished tasks pruned.
* ``pusher``: push queues' due tasks claimed and delivered over HTTP, answers recorded.

The management commands ``run_scheduler``, ``run_dispatcher``, ``run_watchdog`` and
``run_pusher`` wire them to ``taskforge.infra.loop.LoopCommand`` (signals,
sleeping in slices, error backoff, ``--once``). The loops drive the lifecycle
and dispatch; neither imports a loop.
"""
