"""TaskForge's fault-injection harness (``make test-faults``, ``python -m faults``).

It runs the real thing on loopback: its own Redis server, a dedicated Postgres
database (and an embedded Postgres it can restart), two gunicorn API servers,
the scheduler, dispatcher, watchdog and pusher loops, reference workers whose
handler (``faults.handler``) records every execution durably, and, for push
queues, a receiver (``faults.receiver``) that records every delivery. While a
steady stream of enqueues with idempotency keys runs, each scenario injects faults
by process id (kill -9, SIGSTOP/SIGCONT, SIGTERM, Redis FLUSHALL/shutdown,
garbage in the dispatch lanes, Postgres backend kills and restarts, skewed
clocks, failpoints), then lets the load drain and runs ``faults.checker``
against Postgres and the execution log.

Modules: ``services`` (Redis and Postgres), ``stack`` (TaskForge's
processes), ``load`` (the producers), ``receiver`` (the push receiver),
``scenarios`` (the faults), ``checker`` (the invariants), ``run`` (the
orchestration and the summary).
"""
