"""One maintenance round of the history's partitions: the plan of ``layout``, carried out.

Lock levels, which are the point of partitioning (measured by ``bench/partitions.py``):

* ``ATTACH PARTITION`` takes SHARE UPDATE EXCLUSIVE on the parent: inserts
  and reads go on. The tables attached are new and empty, so checking their
  bounds scans nothing.
* ``DETACH PARTITION ... CONCURRENTLY`` takes the same, then waits for the
  transactions already using the parent to end (waiting blocks nobody). It
  cannot run in a transaction, and a parent with a DEFAULT partition refuses
  it: that is why the catch-all is an open-ended range partition instead.
* ``DROP TABLE`` of a detached partition locks only that table, which no
  query can reach any more.
* Only bounding the open-ended partition (the maintenance fell days behind)
  takes ACCESS EXCLUSIVE on the parent, for one short transaction whose
  lock wait is capped by ``lock_timeout``; its bound is proved by a CHECK
  constraint validated beforehand, so the re-attach scans nothing.

Several watchdogs may run rounds at once: every step is planned from the
catalog as it stands and is safe to repeat, so a round that loses a race
fails with a Postgres error (logged by the loop) and the next one picks up
where things are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction

from queues.partitions import catalog, layout
from queues.partitions.layout import DAY, PARENT, Leftover, Partition

#: How long a step that locks what inserts need waits for its lock before giving up for this round.
LOCK_TIMEOUT = "1s"

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class Round:
    """What one round did."""

    created: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    #: The open-ended partition, bounded because it held events: today's (the maintenance had
    #: stopped for days) or ones dated days ahead.
    bounded: str | None = None
    #: Rows moved back into the parent from leftovers before dropping them.
    moved_back: int = 0


def run_round(*, retention_days: int, parent: str = PARENT, now: datetime | None = None) -> Round:
    """Plan from the catalog and carry the plan out; ``now`` defaults to Postgres' ``now()``.

    Must run outside a transaction: a concurrent detach cannot run inside one.
    """
    snapshot = catalog.read(parent)
    moment = now or snapshot.now
    todo = layout.plan(snapshot.partitions, snapshot.unattached, moment, retention_days, parent)
    if todo.idle:
        return Round()
    cutoff = moment - timedelta(days=retention_days)
    created: list[str] = []
    dropped: list[str] = []
    bounded = None
    for name in todo.unfinished:
        _execute(f"ALTER TABLE {_q(parent)} DETACH PARTITION {_q(name)} FINALIZE")
    for name in todo.expired:
        _execute(f"ALTER TABLE {_q(parent)} DETACH PARTITION {_q(name)} CONCURRENTLY")
        _execute(f"DROP TABLE IF EXISTS {_q(name)}")
        dropped.append(name)
    replaced = todo.extension.replaces if todo.extension is not None else None
    if todo.bound is not None:
        bounded = _bound(parent, todo.bound, moment)
    elif replaced is not None and _holds_rows(replaced.name):
        # Only events dated days ahead can be there (events are written with now()): bound it
        # rather than detach it, so that no row is ever out of sight. The next round extends.
        bounded = _bound(parent, replaced, moment)
    elif todo.extension is not None:
        created.extend(_extend(parent, todo.extension))
    moved = 0
    for found in todo.leftovers:
        gone, rows = _sweep(parent, found, cutoff)
        moved += rows
        if gone:
            dropped.append(found.name)
    return Round(tuple(created), tuple(dropped), bounded, moved)


def _extend(parent: str, extension: layout.Extension) -> list[str]:
    """Create the new partitions, detach the open-ended one they replace, attach them, drop it.

    Between the detach and the attach nothing covers the open-ended range, which
    starts at least ``layout.SAFETY`` ahead: no event written now belongs there.
    """
    with transaction.atomic():
        for new in extension.partitions:
            _execute(_create_sql(parent, new.name))
    if extension.replaces is not None:
        _execute(f"ALTER TABLE {_q(parent)} DETACH PARTITION {_q(extension.replaces.name)} CONCURRENTLY")
    with transaction.atomic():
        for new in extension.partitions:
            _execute(_attach_sql(parent, new))
    if extension.replaces is not None:
        # Found empty before the detach; swept like any leftover, so that not even an event
        # dated days ahead and written in between could be lost.
        _sweep(parent, Leftover(extension.replaces.name, keep_rows=True), cutoff=None)
    return [new.name for new in extension.partitions]


def _bound(parent: str, open_ended: Partition, now: datetime) -> str:
    """Re-attach the open-ended partition as the partition of the days it took; a new open-ended one after it.

    1. Its upper bound: two days ahead, or past its latest row if that is later.
    2. A CHECK constraint proving the bound, added NOT VALID (a moment's lock) and
       validated (a scan that lets inserts go on).
    3. One transaction under ACCESS EXCLUSIVE on the parent: detach, re-attach
       bounded (the constraint spares the scan), rename, attach a new open-ended one.
    """
    assert open_ended.lower is not None
    table = _q(open_ended.name)
    with transaction.atomic():
        _execute("SET LOCAL statement_timeout = 0")  # days of events: a scan, but one that blocks nobody
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT max(at) FROM {table}")
            (latest,) = cursor.fetchone()
    upper = layout.day_start(now) + 2 * DAY
    if latest is not None:
        upper = max(upper, layout.day_start(latest) + DAY)
    constraint = _q(f"{open_ended.name}_bound")
    with transaction.atomic():
        _execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        _execute(
            f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {constraint}, "
            f"ADD CONSTRAINT {constraint} CHECK (at < {_literal(upper)}) NOT VALID"
        )
    with transaction.atomic():
        _execute("SET LOCAL statement_timeout = 0")
        _execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {constraint}")
    bounded = Partition(layout.name_for(open_ended.lower, upper, parent), open_ended.lower, upper)
    successor = Partition(layout.name_for(upper, None, parent), upper, None)
    with transaction.atomic():
        _execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        _execute(f"ALTER TABLE {_q(parent)} DETACH PARTITION {table}")
        _execute(f"ALTER TABLE {table} RENAME TO {_q(bounded.name)}")
        _execute(_attach_sql(parent, bounded))
        _execute(_create_sql(parent, successor.name))
        _execute(_attach_sql(parent, successor))
    return bounded.name


def _sweep(parent: str, found: Leftover, cutoff: datetime | None) -> tuple[bool, int]:
    """Drop a table attached to nothing, after moving back the rows that may still be kept.

    Re-checked under its lock: a concurrent round may have attached it since it was planned.
    Returns whether it was dropped and how many rows went back.
    """
    table = _q(found.name)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute("SELECT to_regclass(%s)", [found.name])
        if cursor.fetchone()[0] is None:
            return False, 0
        cursor.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = %s::regclass)", [found.name])
        if cursor.fetchone()[0]:
            return False, 0
        moved = 0
        if found.keep_rows:
            cursor.execute(
                "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute "
                "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
                [found.name],
            )
            (columns,) = cursor.fetchone()
            kept = "" if cutoff is None else f" WHERE at >= {_literal(cutoff)}"
            cursor.execute(f"INSERT INTO {_q(parent)} ({columns}) SELECT {columns} FROM {table}{kept}")
            moved = cursor.rowcount
        cursor.execute(f"DROP TABLE {table}")
    return True, moved


def _holds_rows(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {_q(name)})")
        return bool(cursor.fetchone()[0])


def _create_sql(parent: str, name: str) -> str:
    # LIKE copies the columns and their NOT NULL; the parent's indexes and primary key are
    # created on the table when it is attached. Analysed early, as migration 0002 tuned the
    # table before: the day's partition is the one the per-minute rates read.
    return f"CREATE TABLE IF NOT EXISTS {_q(name)} (LIKE {_q(parent)}) WITH (autovacuum_analyze_scale_factor = 0.05)"


def _attach_sql(parent: str, partition: Partition) -> str:
    lower = "MINVALUE" if partition.lower is None else _literal(partition.lower)
    upper = "MAXVALUE" if partition.upper is None else _literal(partition.upper)
    return f"ALTER TABLE {_q(parent)} ATTACH PARTITION {_q(partition.name)} FOR VALUES FROM ({lower}) TO ({upper})"


def _execute(sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


def _q(name: str) -> str:
    """A table or constraint name, quoted. Every name here is built by ``layout``; refuse anything else."""
    if not _NAME.match(name):
        raise ValueError(f"not a partition name: {name!r}")
    return f'"{name}"'


def _literal(moment: datetime) -> str:
    return f"'{moment.astimezone(UTC).isoformat()}'"
