"""Running a named statement and handing its rows back as dicts.

The lifecycle never builds model instances on its hot paths: every statement
returns task rows (column name -> value), which the API renders directly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
import psycopg
from django.db import connection, transaction
from psycopg.pq import Format

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
    """
    if isinstance(params, Mapping):
        params = literal_arrays(dict(params))
    with connection.cursor() as cursor:
        if connection.timezone_name == "UTC":  # what settings.TIME_ZONE pins
            cursor.cursor.adapters.register_loader(_TIMESTAMPTZ_OID, _FAST_TIMESTAMPTZ)
        cursor.execute(sql, params)
        result = cursor.cursor.pgresult
        if result is None or not result.nfields:
            return []
        # The names straight from the result: cursor.description builds a Column object per column
        # (some 30 per task row) each time it is read.
        names = [result.fname(i).decode() for i in range(result.nfields)]
        rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    json_columns = _JSON_COLUMNS.intersection(names)
    for row in rows:
        for name in json_columns:
            if isinstance(row[name], str):
                row[name] = orjson.loads(row[name])
    return rows


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
