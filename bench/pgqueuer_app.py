"""The PgQueuer peer: one no-op entrypoint, run by ``pgq run bench.pgqueuer_app:main``.

Its jobs live in TaskForge's own bench database (durable tables, the same
Postgres and commit settings). Like Celery's and Huey's ``noop`` the handler
does no work and only counts itself, in its own Redis database, so the harness
counts every peer's finished tasks the same way.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import redis.asyncio
from pgqueuer import PgQueuer
from pgqueuer.db import PsycopgDriver
from pgqueuer.models import Job

ENTRYPOINT = "bench.noop"
DONE_KEY, FIRST_KEY, LAST_KEY = "bench:done", "bench:first", "bench:last"


@asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    """The factory ``pgq run`` enters: one autocommit psycopg connection, as PgQueuer requires."""
    async with (
        await psycopg.AsyncConnection.connect(os.environ["BENCH_PGQUEUER_DSN"], autocommit=True) as connection,
        redis.asyncio.Redis.from_url(os.environ["BENCH_PGQUEUER_COUNTER"]) as counter,
    ):
        yield _app(connection, counter)


def _app(connection: psycopg.AsyncConnection, counter: redis.asyncio.Redis) -> PgQueuer:
    pgq = PgQueuer(PsycopgDriver(connection))

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        now = time.time()
        pipe = counter.pipeline(transaction=False)
        pipe.setnx(FIRST_KEY, now)
        pipe.set(LAST_KEY, now)
        pipe.incr(DONE_KEY)
        await pipe.execute()

    return pgq
