"""What a maintenance round does, decided from the partitions that exist and Postgres' ``now()``.

Pure functions: no database, unit-tested alone. ``queues.partitions.maintain``
carries a :class:`Plan` out.

Every bound is a UTC midnight. A round, in this order:

1. finishes the detaches an earlier round left pending (a crash, a lock
   timeout): ``DETACH ... FINALIZE``;
2. drops the partitions wholly past retention (their upper bound is at or
   before ``now() - retention``), each detached ``CONCURRENTLY`` first;
3. keeps partitions :data:`DAYS_AHEAD` days ahead of today (a day each, or
   :func:`span_days` when the retention period is long). The
   open-ended partition is replaced by the new days and a new open-ended one
   after them; it can be detached without a lock anyone waits for only while
   no event written now can belong to it, so when it starts less than
   :data:`SAFETY` ahead (the maintenance stopped for days and it is taking
   today's events) it is first *bounded* instead: re-attached, in one short
   transaction, as the partition of the days it took. (``maintain`` bounds
   it too when it holds any row, which only an event dated days ahead can
   be: a detached partition's rows would be out of sight until moved back);
4. sweeps the tables an interrupted round left attached to nothing, moving
   back through the parent any row not past retention before dropping them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise

#: The partitioned table.
PARENT = "tf_task_event"
#: Partitions exist through this many days after today...
DAYS_AHEAD = 4
#: ...and a round adds more once the open-ended partition starts fewer days ahead than this,
#: so the open-ended partition is replaced every few days, not every day. At least two days
#: more than SAFETY: an open-ended partition that just became due is still SAFETY ahead
#: at any hour, so it is detached, never bounded.
EXTEND_WITHIN_DAYS = 3
#: A partition covers one day unless the retention period would then be more partitions than this.
MOST_PARTITIONS_KEPT = 30
#: The open-ended partition is detached (concurrently) only while it starts at least this far
#: ahead: events are written with now(), so none can belong to it during the detach.
SAFETY = timedelta(days=1)

DAY = timedelta(days=1)


@dataclass(frozen=True)
class Partition:
    """One partition of the parent: ``[lower, upper)``, None for MINVALUE and MAXVALUE."""

    name: str
    lower: datetime | None
    upper: datetime | None
    #: A ``DETACH ... CONCURRENTLY`` that did not finish: no longer takes rows, still listed.
    detaching: bool = False

    @property
    def open_ended(self) -> bool:
        return self.upper is None


@dataclass(frozen=True)
class Leftover:
    """A table named as a partition but attached to nothing: what an interrupted round left."""

    name: str
    #: Its rows may still be in the retention period (its name does not prove them all past it):
    #: they go back through the parent before it is dropped.
    keep_rows: bool


@dataclass(frozen=True)
class Extension:
    """New partitions to create and attach, replacing the open-ended one (when there is one)."""

    replaces: Partition | None
    partitions: tuple[Partition, ...]


@dataclass(frozen=True)
class Plan:
    unfinished: tuple[str, ...] = ()
    expired: tuple[str, ...] = ()
    extension: Extension | None = None
    #: The open-ended partition that takes today's events: to be bounded (step 3).
    bound: Partition | None = None
    leftovers: tuple[Leftover, ...] = ()

    @property
    def idle(self) -> bool:
        return self == Plan()


def day_start(moment: datetime) -> datetime:
    """The UTC midnight at or before ``moment``."""
    utc = moment.astimezone(UTC)
    return datetime(utc.year, utc.month, utc.day, tzinfo=UTC)


def _day(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y%m%d}"


def name_for(lower: datetime, upper: datetime | None, parent: str = PARENT) -> str:
    """``<parent>_<day>`` for one day, ``<parent>_from_<day>`` open-ended, else ``<parent>_<day>_<day>``."""
    if upper is None:
        return f"{parent}_from_{_day(lower)}"
    if lower == day_start(lower) and upper == lower + DAY:
        return f"{parent}_{_day(lower)}"
    return f"{parent}_{_day(lower)}_{_day(upper)}"


def _leftover_pattern(parent: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(parent)}_(?:(before|from)_)?(\d{{8}})(?:_(\d{{8}}))?$")


def leftover(name: str, cutoff: datetime, parent: str = PARENT) -> Leftover | None:
    """The leftover a table of that name is, or None when it is no partition's name."""
    match = _leftover_pattern(parent).match(name)
    if match is None:
        return None
    prefix, first, second = match.groups()
    if prefix == "from" and second is None:
        upper = None
    elif prefix == "before" and second is None:
        upper = _parse_day(first)
    elif prefix is None:
        upper = _parse_day(second) if second else _parse_day(first) + DAY
    else:
        return None
    return Leftover(name, keep_rows=upper is None or upper > cutoff)


def _parse_day(text: str) -> datetime:
    parsed = date(int(text[:4]), int(text[4:6]), int(text[6:]))
    return datetime(parsed.year, parsed.month, parsed.day, tzinfo=UTC)


def plan(
    partitions: list[Partition], unattached: list[str], now: datetime, retention_days: int, parent: str = PARENT
) -> Plan:
    """What one round does, given the parent's partitions and the tables attached to nothing."""
    cutoff = now - timedelta(days=retention_days)
    attached = [p for p in partitions if not p.detaching]
    leftovers = tuple(
        found for found in (leftover(name, cutoff, parent) for name in sorted(unattached)) if found is not None
    )
    # A pending detach is finished, then swept like any leftover.
    unfinished = tuple(p.name for p in partitions if p.detaching)
    leftovers += tuple(
        Leftover(p.name, keep_rows=p.upper is None or p.upper > cutoff) for p in partitions if p.detaching
    )
    expired = tuple(p.name for p in attached if p.upper is not None and p.upper <= cutoff)
    open_ended = next((p for p in attached if p.open_ended), None)
    extension = bound = None
    if open_ended is not None and open_ended.lower is not None and open_ended.lower < now + SAFETY:
        bound = open_ended
    else:
        extension = _extension(attached, open_ended, now, retention_days, parent)
    return Plan(unfinished, expired, extension, bound, leftovers)


def span_days(retention_days: int) -> int:
    """How many days one partition covers: one, unless the retention period would need more than
    :data:`MOST_PARTITIONS_KEPT` of them (every query that cannot prune by ``at`` plans each one)."""
    return max(1, -(-retention_days // MOST_PARTITIONS_KEPT))


def _extension(
    attached: list[Partition], open_ended: Partition | None, now: datetime, retention_days: int, parent: str
) -> Extension | None:
    today = day_start(now)
    if open_ended is not None:
        assert open_ended.lower is not None  # an open-ended partition from MINVALUE is never planned
        covered_until = open_ended.lower
        if covered_until >= today + EXTEND_WITHIN_DAYS * DAY:
            return None
    else:
        # Nothing open-ended (a round died between detaching it and attaching its successors):
        # coverage resumes where the bounded partitions end, or today when there are none.
        uppers = [p.upper for p in attached if p.upper is not None]
        covered_until = max(uppers) if uppers else today
    target = today + (DAYS_AHEAD + 1) * DAY
    bounds = [covered_until]
    if covered_until < today:
        bounds.append(today)  # the missed past days as one partition, not one per day
    span = span_days(retention_days) * DAY
    step = day_start(bounds[-1]) + span
    while bounds[-1] < target:
        bounds.append(step)
        step += span
    new_open = bounds[-1]
    created = [Partition(name_for(lo, hi, parent), lo, hi) for lo, hi in pairwise(bounds)]
    created.append(Partition(name_for(new_open, None, parent), new_open, None))
    return Extension(open_ended, tuple(created))
