"""Workload sizes: the full run (``make bench``) and ``BENCH_QUICK=1`` for development.

Every knob can be overridden from the environment (``BENCH_<FIELD>``, e.g.
``BENCH_RUNS=1 BENCH_W3_TASKS=5000``), and ``BENCH_ONLY=W1,W3`` runs a subset: W0 (one
sequential producer), W1, W2, W3, W3N (naive worker), W3D (reference worker at its
defaults), W3K (the worker on an @app.task module), W3B, W4, W5, W8 (one producer while
workers drain), CALLS (API CPU per single-task call), CAP (unit costs of the lifecycle and
the capacity check), W6, W7.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    quick: bool = False
    runs: int = 3
    only: tuple[str, ...] = ()
    # TaskForge processes: "asgi" is production (gunicorn.conf.py, uvicorn worker);
    # "gthread" serves the same project through wsgi.py with threads, for comparison.
    serving: str = "asgi"
    gthread_threads: int = 8
    web_concurrency: int = 2
    pool_size: int = 8
    database: str = "taskforge_bench"
    redis_db: int = 15
    celery_redis_db: int = 14
    huey_redis_db: int = 13
    # PgQueuer keeps its jobs in the bench database; only its handler's done-counter is in Redis.
    pgqueuer_redis_db: int = 12
    # W0: one sequential producer (TaskForge's Python client, Celery, Huey, PgQueuer)
    w0_seconds: float = 5.0
    # W1: single enqueue
    w1_clients: int = 16
    w1_seconds: float = 8.0
    # W2: batch enqueue
    w2_clients: int = 4
    w2_batch: int = 100
    w2_seconds: float = 5.0
    # W3: preloaded drain; W3b: produce while draining; W6: W3 over history
    w3_tasks: int = 10_000
    worker_processes: int = 2
    worker_concurrency: int = 2
    worker_max_tasks: int = 50
    # W3N: the naive worker (max_tasks 1, single acks), worker_processes x naive_threads
    naive_tasks: int = 3_000
    naive_threads: int = 4
    # W3D: the reference worker with no flags but its queue and handler
    defaults_tasks: int = 10_000
    celery_tasks: int = 10_000
    peers: bool = True  # Celery, Huey and PgQueuer beside TaskForge (BENCH_PEERS=0 skips them while tuning)
    drain_timeout: float = 120.0
    w6_history: int = 1_000_000
    # W4: latency at a steady low rate
    w4_tasks: int = 200
    w4_rate: float = 20.0
    # W5: delayed tasks due over a window
    w5_tasks: int = 2_000
    w5_seconds: float = 20.0
    # W7: rate limit accuracy
    w7_rate: int = 50
    w7_workers: int = 20
    w7_seconds: float = 20.0
    # W8: one producer enqueuing one by one while 2 worker processes drain
    w8_seconds: float = 8.0
    # W9: a push queue's backlog delivered to a local receiver answering 200, by 1 then 2 pushers
    w9_tasks: int = 5_000
    # ... then, with 2 pushers, tasks due uniformly over a window: due time to delivery
    w9_due_tasks: int = 1_000
    w9_due_seconds: float = 10.0
    # CALLS: API CPU per call of each single-task endpoint, over this many calls each
    calls_per_endpoint: int = 2_000
    calls_clients: int = 4
    # CAP: what a task costs (CPU of every process, WAL, Redis commands, bytes) in the batch form
    # (enqueue 100 per request, batched claims and acks) as fast as it goes, then paced at a
    # fraction of that rate (the capacity check predicts the first from the second), and in the
    # single-call form
    cap_tasks: int = 10_000
    cap_idle_seconds: float = 5.0  # what the stack spends with nothing to do, subtracted from each stage
    cap_producers: int = 2  # connections enqueueing back to back in the saturated run
    cap_pace: float = 0.5  # the paced run offers this share of the saturated run's rate
    cap_single_tasks: int = 2_000
    # A redis-server of the harness's own on a free port (needs redis-server on PATH): CAP counts
    # Redis commands and Redis CPU only there, since on a shared server they include other clients'.
    dedicated_redis: bool = False
    # Profiles of the API workers under W1/W2/W3 (py-spy)
    profile: bool = True

    def wants(self, workload: str) -> bool:
        return not self.only or workload.upper() in self.only


QUICK = {
    "runs": 1,
    "w0_seconds": 2.0,
    "w1_seconds": 3.0,
    "w2_seconds": 2.0,
    "w3_tasks": 2_000,
    "naive_tasks": 300,
    "defaults_tasks": 1_000,
    "celery_tasks": 2_000,
    "w6_history": 100_000,
    "w4_tasks": 60,
    "w5_tasks": 200,
    "w5_seconds": 5.0,
    "w7_seconds": 6.0,
    "w8_seconds": 3.0,
    "w9_tasks": 1_000,
    "w9_due_tasks": 200,
    "w9_due_seconds": 4.0,
    "calls_per_endpoint": 200,
    "cap_tasks": 2_000,
    "cap_idle_seconds": 3.0,
    "cap_single_tasks": 300,
}


def from_env(environ: dict[str, str] | None = None) -> Config:
    environ = dict(os.environ if environ is None else environ)
    quick = environ.get("BENCH_QUICK", "") not in ("", "0", "false", "no")
    values: dict[str, object] = dict(QUICK) if quick else {}
    values["quick"] = quick
    for f in dataclasses.fields(Config):
        raw = environ.get(f"BENCH_{f.name.upper()}")
        if raw is None or f.name in ("quick", "only"):
            continue
        if f.type in ("bool", bool):
            values[f.name] = raw.lower() not in ("", "0", "false", "no")
        elif f.type in ("int", int):
            values[f.name] = int(raw)
        elif f.type in ("float", float):
            values[f.name] = float(raw)
        else:
            values[f.name] = raw
    only = environ.get("BENCH_ONLY", "")
    values["only"] = tuple(part.strip().upper() for part in only.split(",") if part.strip())
    return Config(**values)  # type: ignore[arg-type]
