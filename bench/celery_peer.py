"""Celery beside TaskForge, on the same Redis, in the same run.

W3: Celery drains the same number of preloaded no-op tasks.

1. Empty the Celery DB, enqueue ``count`` tasks with ``apply_async``.
2. Spawn ``celery worker -P prefork -c 2`` and wait for the task counter.
3. Rate = tasks / (last task end - first task start); also from the spawn.

W0 and W8: ``CeleryPeer`` enqueues with ``delay()``, one call per task, and
runs the same worker (see ``bench.peer``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import redis

from bench import peer
from bench.context import Context
from bench.procs import Child
from bench.stack import celery_broker_url, redis_url_for_db, tree_cpu_seconds

WORKER_ARGS = ("worker", "-P", "prefork", "-c", "2", "--loglevel", "WARNING")


def _urls(ctx: Context) -> tuple[str, str]:
    db = ctx.cfg.celery_redis_db
    return celery_broker_url(ctx.stack.server_redis_url, db), redis_url_for_db(ctx.stack.server_redis_url, db)


def drain(ctx: Context, count: int) -> dict[str, Any]:
    broker, counter_url = _urls(ctx)
    os.environ["BENCH_CELERY_BROKER"] = broker
    os.environ["BENCH_CELERY_COUNTER"] = counter_url
    from bench import celery_app  # after the URLs are set: the app reads them at import

    celery_app.app.conf.broker_url = broker
    r = redis.Redis.from_url(counter_url)
    r.flushdb()
    began = time.perf_counter()
    with celery_app.app.producer_or_acquire() as producer:
        for _ in range(count):
            celery_app.noop.apply_async(producer=producer)
    enqueue_rate = count / (time.perf_counter() - began)

    spawned = time.time()
    worker = _start_worker(ctx)
    deadline = time.monotonic() + ctx.cfg.drain_timeout
    try:
        while int(r.get(celery_app.DONE_KEY) or 0) < count:
            if not worker.alive():
                raise RuntimeError(f"celery worker exited:\n{worker.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Celery ran {int(r.get(celery_app.DONE_KEY) or 0)} of {count} tasks in time")
            time.sleep(0.01)
        worker_cpu = tree_cpu_seconds(worker.pid)
    finally:
        ctx.supervisor.stop(worker, grace=10)
    done = int(r.get(celery_app.DONE_KEY) or 0)
    if done != count:
        raise RuntimeError(f"Celery ran {done} tasks for {count} enqueued")
    first, last = float(r.get(celery_app.FIRST_KEY)), float(r.get(celery_app.LAST_KEY))
    r.flushdb()
    return {
        "rate": count / (last - first),
        "rate_from_spawn": count / (last - spawned),
        "enqueue_rate": enqueue_rate,
        "worker_cpu_ms_per_task": worker_cpu * 1000 / count,
    }


def _start_worker(ctx: Context) -> Child:
    broker, counter_url = _urls(ctx)
    celery = str(Path(sys.executable).parent / "celery")
    env = {**os.environ, "BENCH_CELERY_BROKER": broker, "BENCH_CELERY_COUNTER": counter_url}
    return ctx.supervisor.spawn("celery-worker", [celery, "-A", "bench.celery_app", *WORKER_ARGS], env)


class CeleryPeer:
    """Celery for W0 and W8: ``noop.delay()`` per task, one ``prefork -c 2`` worker."""

    name = "Celery"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        broker, counter_url = _urls(ctx)
        os.environ["BENCH_CELERY_BROKER"] = broker
        os.environ["BENCH_CELERY_COUNTER"] = counter_url
        from bench import celery_app  # after the URLs are set: the app reads them at import

        celery_app.app.conf.broker_url = broker
        self.app = celery_app
        self.redis = redis.Redis.from_url(counter_url)

    @staticmethod
    def missing() -> str | None:
        return peer.missing("celery")

    def reset(self) -> None:
        self.redis.flushdb()  # the broker's queue and the counter share this database

    def enqueue(self) -> None:
        self.app.noop.delay()

    def start_workers(self) -> list[Child]:
        return [_start_worker(self.ctx)]

    def done(self) -> int:
        return int(self.redis.get(self.app.DONE_KEY) or 0)
