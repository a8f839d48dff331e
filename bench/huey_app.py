"""The Huey peer: one no-op task on a RedisHuey, defaults otherwise.

Like Celery's ``noop`` (``bench.celery_app``), it does no work and only counts
itself, so the harness knows how many ran. Results are not stored, as Celery's
are ignored. The consumer runs ``huey_consumer bench.huey_app.huey -k process -w 2``.
"""

from __future__ import annotations

import os
import time

import redis
from huey import RedisHuey

huey = RedisHuey("bench", url=os.environ.get("BENCH_HUEY_URL", "redis://127.0.0.1:6379/13"), results=False)

DONE_KEY, FIRST_KEY, LAST_KEY = "bench:done", "bench:first", "bench:last"
_counter: redis.Redis | None = None


def counter() -> redis.Redis:
    global _counter
    if _counter is None:
        _counter = redis.Redis.from_url(os.environ.get("BENCH_HUEY_URL", "redis://127.0.0.1:6379/13"))
    return _counter


@huey.task(name="bench.noop")
def noop() -> None:
    now = time.time()
    pipe = counter().pipeline(transaction=False)
    pipe.setnx(FIRST_KEY, now)
    pipe.set(LAST_KEY, now)
    pipe.incr(DONE_KEY)
    pipe.execute()
