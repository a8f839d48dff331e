"""Running a test's scenario on the event loop, as the API process runs its calls there."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import psycopg

from taskforge.infra.postgres import aio


def run[T](scenario: Callable[[], Awaitable[T]]) -> T:
    """Run ``scenario`` on a fresh event loop, then close that loop's pool (as the API process does when it stops)."""

    async def main() -> T:
        try:
            return await scenario()
        finally:
            await aio.close()

    return asyncio.run(main())


async def kept_plan(sql: str, params: Mapping[str, Any]) -> tuple[int, str]:
    """How many generic plans Postgres made of ``sql`` on the loop's pool, and the plan it would run for ``params``.

    ``sql`` must have run on the pool's (one) connection as a prepared
    statement; ``EXPLAIN EXECUTE`` shows the plan that statement's next run
    would use, the kept one when Postgres keeps one.
    """
    order = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))  # psycopg's $1, $2, ... in this order
    sent = re.sub(r"%\((\w+)\)s", lambda found: f"${order.index(found[1]) + 1}", sql)
    pool = await aio.pool()
    async with pool.connection() as conn:
        kept = await conn.execute("SELECT name, generic_plans FROM pg_prepared_statements WHERE statement = %s", [sent])
        name, generic = await kept.fetchone()
        arguments = psycopg.sql.SQL(", ").join(psycopg.sql.Literal(params[key]) for key in order)
        explained = await conn.execute(
            psycopg.sql.SQL("EXPLAIN (COSTS OFF) EXECUTE {}({})").format(psycopg.sql.Identifier(name), arguments)
        )
        return generic, "\n".join(line for (line,) in await explained.fetchall())
