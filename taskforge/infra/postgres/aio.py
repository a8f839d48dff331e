"""The event loop's own Postgres pool: statements run without a thread hand-off.

The API's views run on a thread pool with Django's connection; the lean
edge's single enqueue (``queues.api.hot``) runs its one statement on the
event loop instead, on a psycopg ``AsyncConnectionPool`` of each API process
made from the same settings as Django's: the same server, options
(timeouts), time zone, adapters and prepared statements, and one option of
its own (no sequential scans, for the plans Postgres keeps). It is the same
kind of pool with the same check on checkout (one empty query, unless
``checkout`` finds none owed: a connection that died while idle, after a
restart or a ``pg_terminate_backend``, is replaced, not used) and, like
``taskforge.infra.postgres.base``, a dead one found makes the pool check
all of its others at once.

The pool belongs to the event loop that first asked for it (one per API
process: gunicorn's uvicorn worker runs one) and holds up to
``TASKFORGE_DB_LOOP_POOL_SIZE`` connections besides Django's pool; at 0
there is none and callers use the thread path.
"""

from __future__ import annotations

import asyncio

import psycopg
from django.conf import settings
from django.db import connection
from psycopg import AsyncConnection, generators, pq
from psycopg_pool import AsyncConnectionPool

from taskforge.infra.postgres import checkout
from taskforge.infra.postgres.base import check_answer

# The pool and the loop it belongs to. A new loop (tests run one per test) gets a new pool;
# the old one's connections close as it is dropped.
_current: tuple[asyncio.AbstractEventLoop, AsyncConnectionPool] | None = None


def enabled() -> bool:
    """Whether this process runs statements on its event loop (``TASKFORGE_DB_LOOP_POOL_SIZE`` > 0)."""
    return bool(settings.DB_LOOP_POOL_SIZE)


async def pool() -> AsyncConnectionPool:
    """The running loop's pool, opened on first use."""
    global _current
    loop = asyncio.get_running_loop()
    if _current is None or _current[0] is not loop:
        _current = (loop, _new_pool())
        await _current[1].open(wait=False)
    return _current[1]


def _new_pool() -> AsyncConnectionPool:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)  # Django's is a synchronous cursor class
    params["autocommit"] = True
    if params.get("prepare_threshold") is not None:
        # Postgres may keep the plans of statements prepared here, and the claim, the ack and
        # the nack of one task are written so that it does (queues.lifecycle.columns.ONE_TASK_BY_ID).
        # Every statement this pool runs finds its rows through an index; a plan kept from
        # when tf_task was nearly empty, where reading the whole table is cheapest, would go
        # on reading it once it has grown.
        # (Behind PgBouncer nothing is prepared: every plan is made for the table as it is.)
        params["options"] = f"{params.get('options', '')} -c enable_seqscan=off".strip()
    return AsyncConnectionPool(
        kwargs=params,
        connection_class=AsyncConnection,
        open=False,
        configure=_configure,
        check=_check if connection.settings_dict["CONN_HEALTH_CHECKS"] else None,
        name="taskforge-loop",
        min_size=1,
        max_size=settings.DB_LOOP_POOL_SIZE,
        timeout=10,  # as Django's pool (settings.py): then the call is a 503
    )


async def _configure(conn: AsyncConnection) -> None:
    """What Django sets on its own new connections: the time zone (and the role, when one is assumed)."""
    zone = connection.timezone_name
    if zone and conn.info.parameter_status("TimeZone") != zone:
        await conn.execute(connection.ops.set_time_zone_sql(), [zone])
    role = connection.settings_dict["OPTIONS"].get("assume_role")
    if role:
        await conn.execute(psycopg.sql.SQL("SET ROLE {}").format(psycopg.sql.Identifier(role)))


async def _ping(conn: AsyncConnection) -> None:
    """One empty query sent by libpq directly (as ``base._ping``): psycopg's cursor around it cost 100 us."""
    pgconn = conn.pgconn
    pgconn.send_query(b"")
    results = await conn.wait(generators.execute(pgconn))
    check_answer(results[-1] if results else None, pgconn)


async def _check(conn: AsyncConnection) -> None:
    if not checkout.needs_ping(conn):
        checkout.handed_out(conn)
        return
    try:
        if conn.pgconn.transaction_status != pq.TransactionStatus.IDLE:
            await AsyncConnectionPool.check_connection(conn)
        else:
            await _ping(conn)
        checkout.handed_out(conn)
    except Exception:
        found = getattr(conn, "_pool", None)
        if isinstance(found, AsyncConnectionPool):
            # The others most likely died with it: check them all now, not one request at a time.
            sweep = asyncio.get_running_loop().create_task(found.check())
            _sweeps.add(sweep)
            sweep.add_done_callback(_sweeps.discard)
        raise


_sweeps: set[asyncio.Task[None]] = set()


async def close() -> None:
    """Close the running loop's pool (the process is stopping)."""
    global _current
    if _current is not None and _current[0] is asyncio.get_running_loop():
        found = _current[1]
        _current = None
        await found.close()
