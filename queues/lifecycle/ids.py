"""New task ids: UUIDs of version 7 (RFC 9562), which begin with the time they were made.

A task's id is its primary key. Random ids (version 4) land anywhere in the
key's index, so each insert dirties its own leaf page, and after every
checkpoint the first change to a page writes the whole page to the WAL.
Ids that begin with the time go to the index's right edge, where Postgres
inserts without descending the tree (its fast path for the rightmost leaf)
and one page takes the tasks of many statements. The contract promises only
that ids are UUIDs; clients treat them as opaque.

The layout (RFC 9562, section 5.7, with section 6.2's third method): 48 bits of
Unix time in milliseconds, the version, 12 bits of the millisecond's fraction
(so ids made one after another sort in the order they were made, to about a
quarter of a microsecond), the variant, then 62 random bits from the
operating system's generator: one ``os.urandom`` call per batch, where
``uuid.uuid4`` makes one per id.
"""

from __future__ import annotations

import os
import time
import uuid

_VERSION = 0x7 << 76
_VARIANT = 0b10 << 62
_FRACTIONS_PER_MS = 1 << 12
_NS_PER_MS = 1_000_000


def new_task_ids(count: int) -> list[uuid.UUID]:
    """``count`` new ids, made now: they share the time bits and differ in their random ones."""
    ms, ns = divmod(time.time_ns(), _NS_PER_MS)
    head = (ms << 80) | _VERSION | ((ns * _FRACTIONS_PER_MS // _NS_PER_MS) << 64) | _VARIANT
    random = os.urandom(8 * count)
    return [uuid.UUID(int=head | int.from_bytes(random[at : at + 8]) >> 2) for at in range(0, 8 * count, 8)]
