"""PgQueuer beside TaskForge in W0 and W8, on TaskForge's own Postgres and bench database.

Its schema is installed once per bench database with ``pgq install
--durability durable`` (logged tables; commits as durable as TaskForge's, the
server's ``synchronous_commit`` applying to both), and checked to be so. The
producer calls ``enqueue`` once per task on one autocommit connection (each
enqueue its own commit); W8 runs two ``pgq run bench.pgqueuer_app:main``
processes at their defaults (batch size 10) but for ``--log-level WARNING``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench import peer
from bench.context import Context
from bench.procs import ROOT, Child
from bench.stack import redis_url_for_db

WORKER_PROCESSES = 2
PAYLOAD = b"{}"


def _pgq() -> str:
    return str(Path(sys.executable).parent / "pgq")


def install(database_url: str) -> None:
    """Install PgQueuer's schema in the bench database, with every table logged."""
    with psycopg.connect(database_url, autocommit=True) as pg:
        installed = pg.execute("SELECT to_regclass('pgqueuer') IS NOT NULL").fetchone()
        if installed is None or not installed[0]:
            done = subprocess.run(
                [_pgq(), "--pg-dsn", database_url, "install", "--durability", "durable"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"pgq install failed:\n{done.stdout}\n{done.stderr}")
        unlogged = pg.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE 'pgqueuer%' AND relkind = 'r' AND relpersistence <> 'p'"
        ).fetchall()
    if unlogged:
        raise RuntimeError(f"PgQueuer tables are not durable: {[row[0] for row in unlogged]}")


class PgQueuerPeer:
    name = "PgQueuer"

    def __init__(self, ctx: Context) -> None:
        from pgqueuer.db import SyncPsycopgDriver
        from pgqueuer.queries import SyncQueries

        from bench import pgqueuer_app

        self.ctx = ctx
        self.app = pgqueuer_app
        self.counter_url = redis_url_for_db(ctx.stack.server_redis_url, ctx.cfg.pgqueuer_redis_db)
        self.redis = redis.Redis.from_url(self.counter_url)
        install(ctx.stack.database_url)
        self.connection = psycopg.connect(ctx.stack.database_url, autocommit=True)
        self.queries: Any = SyncQueries(SyncPsycopgDriver(self.connection))

    @staticmethod
    def missing() -> str | None:
        return peer.missing("pgqueuer")

    def reset(self) -> None:
        self.connection.execute("TRUNCATE pgqueuer")
        self.redis.flushdb()

    def enqueue(self) -> None:
        self.queries.enqueue(self.app.ENTRYPOINT, PAYLOAD)

    def start_workers(self) -> list[Child]:
        env = {
            **os.environ,
            "BENCH_PGQUEUER_DSN": self.ctx.stack.database_url,
            "BENCH_PGQUEUER_COUNTER": self.counter_url,
        }
        # Warnings only, as Celery and Huey run (pgqueuer 1.6.0's CLI needs typer < 0.29 for this flag).
        argv = [_pgq(), "run", "bench.pgqueuer_app:main", "--log-level", "WARNING"]
        return [self.ctx.supervisor.spawn(f"pgq-run-{n}", argv, env) for n in range(WORKER_PROCESSES)]

    def done(self) -> int:
        return int(self.redis.get(self.app.DONE_KEY) or 0)

    def close(self) -> None:
        self.connection.close()
