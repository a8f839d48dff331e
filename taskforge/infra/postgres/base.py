"""Django's PostgreSQL backend whose pool sweeps itself when it finds a dead connection.

psycopg_pool checks the one connection a checkout takes and, when it is dead,
waits before trying the next (1 s, 2 s, 4 s, ...). After a Postgres restart,
a failover or a ``pg_terminate_backend`` every pooled connection is dead at
once, so a pool of 8 outlasts the 10 s checkout timeout and requests fail
although Postgres is back (``tests/tools/faults/test_db_unavailable.py``).
One dead connection says the others probably died with it: check them all
there and then, so the next attempt gets a fresh connection.

Django builds the pool itself and always passes psycopg_pool's plain check,
so the sweeping check is put in place of it once the pool exists.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.db.backends.postgresql import base
from psycopg import pq
from psycopg_pool import ConnectionPool

from taskforge.infra.postgres import checkout


def _ping(conn: Any) -> None:
    """psycopg_pool's check (one empty query) sent by libpq directly.

    The same round trip, which is what finds a backend terminated a moment
    ago, without the cursor, the query conversion and the result objects
    psycopg builds around it: about 30 us of CPU on every checkout. A dead
    connection is left in libpq's bad state, so the pool discards it.
    """
    if conn.pgconn.transaction_status != pq.TransactionStatus.IDLE:
        ConnectionPool.check_connection(conn)  # not expected at checkout; psycopg's own check knows what to do
        return
    check_answer(conn.pgconn.exec_(b""), conn.pgconn)


def check_answer(result: pq.abc.PGresult | None, pgconn: pq.abc.PGconn) -> None:
    """Raise ``OperationalError`` unless ``result`` is the empty query's own answer (the check passed)."""
    if result is None or result.status != pq.ExecStatus.EMPTY_QUERY:
        error = (result.error_message if result is not None else None) or pgconn.error_message
        message = (error or b"").decode(errors="replace").strip()
        status = pq.ExecStatus(result.status).name if result is not None else "no answer"
        raise psycopg.OperationalError(f"the connection failed its check: {message or status}")


def check_connection(conn: Any) -> None:
    """The pool's check on checkout: the empty query, unless ``checkout`` finds it owed nothing."""
    if not checkout.needs_ping(conn):
        checkout.handed_out(conn)
        return
    try:
        _ping(conn)
        checkout.handed_out(conn)
    except Exception:
        # psycopg_pool marks the connection it is handing out with its pool.
        pool = getattr(conn, "_pool", None)
        if isinstance(pool, ConnectionPool):
            pool.check()
        raise


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> ConnectionPool | None:
        pool: ConnectionPool | None = super().pool
        if pool is not None and pool._check is ConnectionPool.check_connection:
            pool._check = check_connection
        return pool
