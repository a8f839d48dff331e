"""The partitions Postgres has, read from its catalog with its clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from queues.partitions.layout import PARENT, Partition

# The parent's partitions with their bounds, and the tables named like them that are attached to
# nothing. The bounds are cut out of pg_get_expr's text and cast back in the same session, so the
# TimeZone and DateStyle that printed them read them too (MINVALUE and MAXVALUE come back null).
_PARTITIONS = r"""
SELECT c.relname, i.inhrelid IS NOT NULL AS attached, coalesce(i.inhdetachpending, false),
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']*)''\)'))[1]::timestamptz,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']*)''\)'))[1]::timestamptz
FROM pg_class c
LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace
  AND (i.inhparent = %(parent)s::regclass OR (i.inhparent IS NULL AND c.relname LIKE %(pattern)s))
ORDER BY 4 NULLS FIRST, c.relname
"""


@dataclass(frozen=True)
class Snapshot:
    now: datetime
    partitions: list[Partition]
    #: Tables named like the parent's partitions (``<parent>_...``) attached to nothing.
    unattached: list[str]


def read(parent: str = PARENT) -> Snapshot:
    pattern = parent.replace("_", r"\_") + r"\_%"
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
        cursor.execute(_PARTITIONS, {"parent": parent, "pattern": pattern})
        rows = cursor.fetchall()
    partitions = [
        Partition(name, lower, upper, detaching) for name, attached, detaching, lower, upper in rows if attached
    ]
    unattached = [name for name, attached, *_ in rows if not attached]
    return Snapshot(now, partitions, unattached)
