"""The Celery peer: one no-op task on a Redis broker, defaults otherwise.

``noop`` does no work; it only counts itself (one pipelined Redis round trip)
so the harness knows when the last one ran, and when the first one started.
Results are ignored (no result backend), as most Celery deployments do for
fire-and-forget jobs.
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

app = Celery("bench", broker=os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/14"))
app.conf.update(
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)

DONE_KEY, FIRST_KEY, LAST_KEY = "bench:done", "bench:first", "bench:last"
_counter: redis.Redis | None = None


def counter() -> redis.Redis:
    global _counter
    if _counter is None:
        _counter = redis.Redis.from_url(os.environ.get("BENCH_CELERY_COUNTER", "redis://127.0.0.1:6379/14"))
    return _counter


@app.task(name="bench.noop")
def noop() -> None:
    now = time.time()
    pipe = counter().pipeline(transaction=False)
    pipe.setnx(FIRST_KEY, now)
    pipe.set(LAST_KEY, now)
    pipe.incr(DONE_KEY)
    pipe.execute()
