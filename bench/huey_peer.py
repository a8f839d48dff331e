"""Huey beside TaskForge in W0 and W8: a RedisHuey on its own Redis database.

Tasks are enqueued by calling the task (``noop()``), one call per task; the
consumer is ``huey_consumer bench.huey_app.huey -k process -w 2`` (two worker
processes, Huey's default blocking Redis reads) at ``-q`` (warnings only,
as Celery runs at ``--loglevel WARNING``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import redis

from bench import peer
from bench.context import Context
from bench.procs import Child
from bench.stack import redis_url_for_db

CONSUMER_ARGS = ("bench.huey_app.huey", "-k", "process", "-w", "2", "-q")


class HueyPeer:
    name = "Huey"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.url = redis_url_for_db(ctx.stack.server_redis_url, ctx.cfg.huey_redis_db)
        os.environ["BENCH_HUEY_URL"] = self.url
        from bench import huey_app  # after the URL is set: the app reads it at import

        self.app = huey_app
        self.redis = redis.Redis.from_url(self.url)

    @staticmethod
    def missing() -> str | None:
        return peer.missing("huey")

    def reset(self) -> None:
        self.redis.flushdb()  # Huey's queue and the counter share this database

    def enqueue(self) -> None:
        self.app.noop()

    def start_workers(self) -> list[Child]:
        consumer = str(Path(sys.executable).parent / "huey_consumer")
        env = {**os.environ, "BENCH_HUEY_URL": self.url}
        return [self.ctx.supervisor.spawn("huey-consumer", [consumer, *CONSUMER_ARGS], env)]

    def done(self) -> int:
        return int(self.redis.get(self.app.DONE_KEY) or 0)
