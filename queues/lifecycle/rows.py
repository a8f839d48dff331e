"""Running a named statement and handing its rows back as dicts.

The lifecycle never builds model instances on its hot paths: every statement
returns task rows (column name -> value), which the API renders directly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
import psycopg
from django.db import connection, transaction
from psycopg import pq
from psycopg.pq import Format

from taskforge.http.errors import connection_lost
from taskforge.infra.postgres import aio
from taskforge.infra.postgres.arrays import literal_arrays

#: A task (or other) row: column name -> value.
Row = dict[str, Any]

#: The per-item outcome of a batch move: the moved row, or the domain error for that item.
DomainErrorT = Exception

# Django's psycopg setup hands jsonb back as text (JSONField parses it); raw
# statements parse these columns themselves.
_JSON_COLUMNS = frozenset({"payload", "result", "progress"})

# psycopg's C loader for timestamptz. Django installs a pure-Python one (to pin
# the tzinfo); ours returns the same UTC datetimes about 6x faster, and a
# 100-task batch returns some 1,000 of them (make bench: 14% of a batch enqueue).
_TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid
_FAST_TIMESTAMPTZ = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, Format.TEXT)


def fetch_rows(sql: str, params: Mapping[str, Any] | Sequence[Any]) -> list[Row]:
    """Run one statement on Django's connection; its rows as dicts (none for a plain DELETE).

    Lists among named ``params`` go as array literals (``taskforge.infra.postgres.arrays``):
    the statement casts each one (``%(ids)s::uuid[]``) or compares with it (``= ANY``).
    The statement is prepared on its connection (see :func:`_execute`).
    """
    if isinstance(params, Mapping):
        params = literal_arrays(dict(params))
    with connection.cursor() as wrapper:
        cursor = _execute(wrapper, sql, params)
        return _as_rows(cursor.pgresult, cursor.fetchall)


async def fetch_rows_on(conn: psycopg.AsyncConnection[Any], sql: str, params: Mapping[str, Any]) -> list[Row]:
    """:func:`fetch_rows` on a connection of the event loop's pool (``taskforge.infra.postgres.aio``).

    The same statement, parameters, preparing and rows; errors come as
    Django's database errors, as from Django's connection.
    """
    cursor = _own_cursor(conn, conn.cursor)
    with connection.wrap_database_errors:
        # Prepared as on Django's connections; behind PgBouncer (no threshold) never.
        await cursor.execute(sql, literal_arrays(dict(params)), prepare=conn.prepare_threshold is not None or None)
        result = cursor.pgresult
        values = await cursor.fetchall() if result is not None and result.nfields else []
    return _as_rows(result, lambda: values)


async def fetch_rows_on_loop(sql: str, params: Mapping[str, Any]) -> list[Row]:
    """:func:`fetch_rows_on` on a connection checked out of the event loop's pool, in autocommit.

    The statement is durable when this returns. A lost connection or a pool
    that timed out raises what the thread path raises for it (a 503), a
    statement Postgres refused its own error.
    """
    pool = await aio.pool()
    with connection.wrap_database_errors:  # a pool that times out is Django's OperationalError too
        async with pool.connection() as conn:
            try:
                return await fetch_rows_on(conn, sql, params)
            except Exception as exc:
                lost = connection_lost(exc, conn)  # judged before the connection goes back
                if lost is exc:
                    raise
                raise lost from exc


def _as_rows(result: pq.abc.PGresult | None, fetchall: Callable[[], list[Any]]) -> list[Row]:
    """The rows of a statement's ``result`` (their values from ``fetchall``) as dicts, JSON columns parsed."""
    if result is None or not result.nfields:
        return []
    # The names straight from the result: cursor.description builds a Column object per column
    # (some 30 per task row) each time it is read.
    names = [(result.fname(i) or b"").decode() for i in range(result.nfields)]
    rows = [dict(zip(names, values, strict=True)) for values in fetchall()]
    json_columns = _JSON_COLUMNS.intersection(names)
    for row in rows:
        for name in json_columns:
            if isinstance(row[name], str):
                row[name] = orjson.loads(row[name])
    return rows


def _execute(wrapper: Any, sql: str, params: Mapping[str, Any] | Sequence[Any]) -> Any:
    """Run ``sql`` as a prepared statement of its connection, where the connection may keep one.

    Django binds parameters on the client, so Postgres parsed and planned
    every lifecycle statement on every call: a quarter of a millisecond of its
    CPU for a single enqueue's statement (``EXPLAIN (ANALYZE, SUMMARY)``),
    about as much as running it. The statements are few and fixed, so each
    connection prepares each one once (psycopg's ``prepare=True``, its cache
    keyed by the text and the parameter types) and then only binds and runs it.

    Django turns psycopg's preparing off unless its OPTIONS ask for it, which
    ``taskforge/settings.py`` does except behind a transaction-mode pooler
    (``TASKFORGE_DB_PGBOUNCER``): a prepared statement belongs to one server
    connection, which PgBouncer before 1.21 does not keep for a client. There,
    and while Django records queries (``DEBUG``, ``CaptureQueriesContext``),
    the statement takes Django's own cursor, bound on the client.
    Django's execute wrappers and its error classes apply either way.
    """
    raw = wrapper.cursor.connection
    if raw.prepare_threshold is None or connection.queries_logged:
        _load_timestamps_fast(wrapper.cursor)
        wrapper.execute(sql, params)
        return wrapper.cursor
    cursor = _own_cursor(raw, lambda: psycopg.Cursor(raw))

    def execute(sql: str, params: Any, many: bool, context: dict[str, Any]) -> None:
        with connection.wrap_database_errors:
            cursor.execute(sql, params, prepare=True)

    for outer in reversed(connection.execute_wrappers):
        execute = functools.partial(outer, execute)
    execute(sql, params, False, {"connection": connection, "cursor": wrapper})
    return cursor


def _own_cursor(conn: Any, new_cursor: Callable[[], Any]) -> Any:
    """The lifecycle's cursor on ``conn``, made by ``new_cursor`` the first time and kept with it.

    A new cursor builds its own adapters (a copy of the connection's, to take
    the fast timestamp loader) and its own transformer: about 50 µs of the
    170 µs of CPU a single enqueue's statement cost on the event loop (2,000
    in a row, alternating, one process). A psycopg cursor runs any number of
    statements one after another, also after one that failed, and a
    connection serves one caller at a time (a pool's, or a thread's own), so
    one per connection serves every statement run on it. It is kept as an
    attribute of the connection, not in a weak map keyed by it: the cursor
    refers to its connection, which would keep the map's key alive.
    """
    cursor = getattr(conn, "_taskforge_cursor", None)
    if cursor is None:
        cursor = new_cursor()
        _load_timestamps_fast(cursor)
        conn._taskforge_cursor = cursor
    return cursor


def _load_timestamps_fast(cursor: Any) -> None:
    if connection.timezone_name == "UTC":  # what settings.TIME_ZONE pins
        cursor.adapters.register_loader(_TIMESTAMPTZ_OID, _FAST_TIMESTAMPTZ)


@contextmanager
def lone_statement() -> Iterator[None]:
    """Where a move is one statement: atomic by itself, so no transaction of its own.

    Outside a transaction the statement runs in autocommit: no ``BEGIN`` and
    no ``COMMIT`` round trip, two of the four a single call cost, and it is
    durable when it returns (hooks registered with ``on_commit`` then run at
    once, in order). Inside a caller's transaction it keeps a savepoint, as
    ``transaction.atomic()`` would.
    """
    if connection.in_atomic_block:
        with transaction.atomic():
            yield
    else:
        yield


def dumps_json(value: Any) -> str:
    """Serialize a jsonb parameter with orjson (``Jsonb(value, dumps=dumps_json)``)."""
    return orjson.dumps(value).decode()
