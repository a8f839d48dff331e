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

from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool


def check_connection(conn: Any) -> None:
    try:
        ConnectionPool.check_connection(conn)
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
