"""Running a named statement and handing its rows back as dicts.

The lifecycle never builds model instances on its hot paths: every statement
returns task rows (column name -> value), which the API renders directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import psycopg
from django.db import connection
from psycopg.pq import Format

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
    """Run one statement on Django's connection; its rows as dicts (none for a plain DELETE)."""
    with connection.cursor() as cursor:
        if connection.timezone_name == "UTC":  # what settings.TIME_ZONE pins
            cursor.cursor.adapters.register_loader(_TIMESTAMPTZ_OID, _FAST_TIMESTAMPTZ)
        cursor.execute(sql, params)
        if cursor.description is None:
            return []
        names = [column.name for column in cursor.description]
        rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    json_columns = _JSON_COLUMNS.intersection(names)
    for row in rows:
        for name in json_columns:
            if isinstance(row[name], str):
                row[name] = orjson.loads(row[name])
    return rows


def dumps_json(value: Any) -> str:
    """Serialize a jsonb parameter with orjson (``Jsonb(value, dumps=dumps_json)``)."""
    return orjson.dumps(value).decode()
