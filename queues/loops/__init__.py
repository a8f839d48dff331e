"""The background loops, one module each, each with a ``run_once()`` that returns what it did.

* ``scheduler``: due retries promoted, delayed tasks into the lanes on time.
* ``dispatcher``: every unpaused queue's Redis lane refilled from Postgres.
* ``watchdog``: lapsed leases expired (failed attempts), old finished tasks pruned.

The management commands ``run_scheduler``, ``run_dispatcher`` and
``run_watchdog`` wire them to ``taskforge.infra.loop.LoopCommand`` (signals,
sleeping in slices, error backoff, ``--once``). The loops drive the lifecycle
and dispatch; neither imports a loop.
"""
