"""Pages of the task and DLQ lists, bounded by rows and by bytes.

A task carries a payload and a result of up to ``TASKFORGE_MAX_PAYLOAD_BYTES``
each (1 MiB by default) and an error of up to 64 KiB, so 500 rows could be
over a gigabyte of JSON. A page therefore stops at ``limit`` rows or once it
holds ``PAGE_BYTES`` of those fields, whichever comes first, and always holds
at least one row. A short page still carries ``next`` when more rows follow
(as Google Cloud Tasks does): only ``"next": null`` means the end.

The sizes are measured by Postgres over just the ``limit + 1`` candidate keys;
only the rows that fit are then read in full.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

#: Bytes of payloads, results and errors one page of a list may hold (documented in docs/api.md).
PAGE_BYTES = 4 * 1024 * 1024

# The text size of the heavy columns of one row, as Postgres renders them.
TASK_BYTES = (
    "octet_length(tf_task.payload::text) + coalesce(octet_length(tf_task.result::text), 0)"
    " + coalesce(octet_length(tf_task.last_error), 0)"
)
DEAD_LETTER_BYTES = "octet_length(tf_dead_letter.payload::text) + coalesce(octet_length(tf_dead_letter.last_error), 0)"


@dataclass(frozen=True)
class Page:
    keys: list[uuid.UUID]  # the rows of this page, in list order
    next_after: tuple[datetime, uuid.UUID] | None  # (time, id) of the last row when more follow


def bounded_page(rows: QuerySet[Any], time_field: str, key_field: str, size_sql: str, limit: int) -> Page:
    """The keys of the first page of ``rows`` (already filtered), newest ``time_field`` first."""
    candidates = list(
        rows.order_by(f"-{time_field}", f"-{key_field}")
        .annotate(row_bytes=RawSQL(size_sql, ()))
        .values_list(key_field, time_field, "row_bytes")[: limit + 1]
    )
    taken: list[tuple[uuid.UUID, datetime]] = []
    used = 0
    for key, at, size in candidates[:limit]:
        if taken and used + int(size) > PAGE_BYTES:
            break
        taken.append((key, at))
        used += int(size)
    more = len(candidates) > len(taken)
    last_key, last_at = taken[-1] if taken else (None, None)
    return Page(
        keys=[key for key, _ in taken],
        next_after=(last_at, last_key) if more and last_key is not None and last_at is not None else None,
    )
