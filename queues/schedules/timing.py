"""When a schedule fires: cron expressions, fixed intervals, daylight saving, catch-up.

Pure functions of their arguments (no database, no clock of their own): the
caller passes Postgres' ``now()``. Fire times are whole seconds in UTC.

* A cron expression has 5 fields (minute hour day-of-month month day-of-week)
  or 6 with seconds first; ranges, lists, steps and month/day names. It is
  read in the schedule's time zone on the wall clock, then mapped to UTC: a
  wall time that a daylight-saving gap skips fires once, at the first instant
  after the gap; a wall time that a fall-back repeats fires once, at its first
  occurrence.
* ``every_seconds`` fires every that many seconds from an anchor, one of its
  fire times: the schedule's ``next_run_at``, stored, so every process
  computes the same fire times (the first one is planned ``every_seconds``
  after the schedule is created, re-timed or resumed). The time zone does not
  matter.
* Fire times due by at most :data:`LATE_GRACE_SECONDS` are late, not missed:
  each fires (a scheduler a little behind, or restarting, loses none).
  Older ones were missed while no scheduler ran, and ``catch_up`` decides:
  ``latest`` fires the latest of them, ``none`` none, ``all`` each of them
  (with the late ones, at most :data:`MAX_FIRES_PER_PASS` in all, the latest kept).
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from croniter import CroniterBadDateError, CroniterError, croniter

CatchUp = Literal["latest", "none", "all"]
CATCH_UP_POLICIES: tuple[CatchUp, ...] = ("latest", "none", "all")
MIN_EVERY_SECONDS = 1
MAX_EVERY_SECONDS = 86_400
LATE_GRACE_SECONDS = 60
MAX_FIRES_PER_PASS = 100

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_MICROSECOND = timedelta(microseconds=1)
# One field: numbers, 3-letter month or day names, '*', and the ',' '-' '/' that join them.
# croniter also takes L, W, #, H and @-macros; the contract promises only standard cron.
_FIELD = re.compile(r"^(?:\*|[0-9]+|[A-Za-z]{3})(?:[-/,](?:\*|[0-9]+|[A-Za-z]{3}))*$")


@dataclass(frozen=True)
class Timing:
    """What decides a schedule's fire times: exactly one of ``cron`` and ``every_seconds``."""

    cron: str | None = None
    every_seconds: int | None = None
    timezone: str = "UTC"
    #: A fire time of an interval schedule: its series runs through it (ignored with cron).
    anchor: datetime = EPOCH


def check_cron(expression: str) -> str:
    """``expression`` (its fields one space apart) if it is a valid 5- or 6-field cron expression that fires.

    Raises ValueError saying what is wrong otherwise.
    """
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise ValueError("A cron expression has 5 fields (minute hour day month weekday), or 6 with seconds first.")
    for field in fields:
        if not _FIELD.match(field):
            raise ValueError(f"Not a cron field: {field!r} (numbers, names, '*', ranges, lists and steps only).")
    try:
        next_fire(Timing(cron=expression), EPOCH + timedelta(days=365 * 56))
    except CroniterBadDateError:  # croniter searched its 50 years: 0 0 30 2 *
        raise ValueError("This cron expression never matches a date.") from None
    except (CroniterError, ValueError, KeyError) as exc:
        raise ValueError(f"Not a valid cron expression: {exc}") from None
    return " ".join(fields)


def check_timezone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone called ``name``; raises ValueError for any other string."""
    # ZoneInfo also opens absolute and relative file paths: only zone-name characters pass.
    if not re.fullmatch(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*", name) or name not in _zone_names():
        raise ValueError(f"Unknown time zone {name!r}: use an IANA name such as 'UTC' or 'Europe/Berlin'.")
    return zoneinfo.ZoneInfo(name)


_ZONE_NAMES: frozenset[str] | None = None


def _zone_names() -> frozenset[str]:
    global _ZONE_NAMES
    if _ZONE_NAMES is None:
        _ZONE_NAMES = frozenset(zoneinfo.available_timezones()) | {"UTC"}
    return _ZONE_NAMES


def whole_seconds(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(microsecond=0)


def fire_key(name: str, fire_time: datetime) -> str:
    """The idempotency key of a fire: one task per schedule and fire time, however many processes fire it."""
    return f"schedule:{name}:{fire_time.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


# --- fire times ------------------------------------------------------------------------------------


def next_fire(timing: Timing, after: datetime) -> datetime:
    """The first fire time strictly after ``after``."""
    return next(_forward(timing, after))


def upcoming(timing: Timing, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` fire times strictly after ``after``."""
    times = _forward(timing, after)
    return [next(times) for _ in range(count)]


def fires_before(timing: Timing, before: datetime, floor: datetime, limit: int) -> list[datetime]:
    """Up to ``limit`` fire times in ``[floor, before)``, the latest ones, oldest first."""
    found: list[datetime] = []
    for fire in _backward(timing, before):
        if fire < floor or len(found) >= limit:
            break
        found.append(fire)
    return found[::-1]


@dataclass(frozen=True)
class Due:
    """What a schedule whose ``next_run_at`` has come should do now."""

    #: the fire times to enqueue, oldest first
    fires: list[datetime]
    #: the first fire time after now
    next_run_at: datetime
    #: whether some fire times were passed over (missed and not caught up, or beyond the cap)
    skipped: bool


def due_fires(timing: Timing, next_run_at: datetime, now: datetime, catch_up: CatchUp) -> Due:
    """The fire times in ``[next_run_at, now]`` to enqueue, by lateness and ``catch_up`` (see the module)."""
    if next_run_at > now:
        return Due(fires=[], next_run_at=next_run_at, skipped=False)
    grace_start = now - timedelta(seconds=LATE_GRACE_SECONDS)
    late = fires_before(timing, now + _MICROSECOND, max(next_run_at, grace_start), MAX_FIRES_PER_PASS)
    missed: list[datetime] = []
    if next_run_at < grace_start:
        wanted = {"none": 0, "latest": 1, "all": MAX_FIRES_PER_PASS - len(late)}[catch_up]
        missed = fires_before(timing, grace_start, next_run_at, wanted) if wanted > 0 else []
    fires = missed + late
    skipped = _count_at_most(timing, next_run_at, now, len(fires) + 1) > len(fires)
    return Due(fires=fires, next_run_at=next_fire(timing, now), skipped=skipped)


def _count_at_most(timing: Timing, floor: datetime, now: datetime, cap: int) -> int:
    """How many fire times lie in ``[floor, now]``, counted up to ``cap``."""
    if timing.every_seconds is not None:
        step = _interval_us(timing.every_seconds)
        first = -(-_us(floor, timing.anchor) // step)
        last = _us(now, timing.anchor) // step
        return max(0, min(cap, last - first + 1))
    count = 0
    for fire in _forward(timing, floor - _MICROSECOND):
        if fire > now or count >= cap:
            break
        count += 1
    return count


# --- iteration -------------------------------------------------------------------------------------


def _us(at: datetime, anchor: datetime) -> int:
    return (at - anchor) // _MICROSECOND


def _interval_us(every_seconds: int) -> int:
    return every_seconds * 1_000_000


def _forward(timing: Timing, after: datetime) -> Iterator[datetime]:
    if timing.every_seconds is not None:
        step = _interval_us(timing.every_seconds)
        k = _us(after, timing.anchor) // step + 1
        while True:
            yield timing.anchor + k * step * _MICROSECOND
            k += 1
    zone, expr = _cron(timing)
    previous = after
    wall = _wall(after, zone)
    times = croniter(expr, wall, ret_type=datetime, second_at_beginning=_has_seconds(expr))
    while True:
        candidate = _to_utc(times.get_next(datetime), zone)
        # Wall times of a repeated hour map to their first occurrence, which may lie behind us.
        if candidate > previous:
            previous = candidate
            yield candidate


def _backward(timing: Timing, before: datetime) -> Iterator[datetime]:
    """Fire times strictly before ``before``, latest first (stops at the epoch)."""
    if timing.every_seconds is not None:
        step = _interval_us(timing.every_seconds)
        k = -(-_us(before, timing.anchor) // step) - 1
        while (fire := timing.anchor + k * step * _MICROSECOND) >= EPOCH:
            yield fire
            k -= 1
        return
    zone, expr = _cron(timing)
    previous = before
    times = croniter(expr, _wall(before, zone), ret_type=datetime, second_at_beginning=_has_seconds(expr))
    while True:
        try:
            candidate = _to_utc(times.get_prev(datetime), zone)
        except CroniterBadDateError:
            return
        if candidate < previous:
            previous = candidate
            yield candidate
        if candidate < EPOCH:
            return


def _has_seconds(expr: str) -> bool:
    return len(expr.split()) == 6


def _cron(timing: Timing) -> tuple[zoneinfo.ZoneInfo, str]:
    if timing.cron is None:
        raise ValueError("a schedule needs cron or every_seconds")
    return check_timezone(timing.timezone), timing.cron


def _wall(at: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    """``at`` on the zone's wall clock, naive (croniter then steps through wall times only)."""
    return at.astimezone(zone).replace(tzinfo=None)


def _to_utc(wall: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    """The instant of a wall time: the first occurrence of a repeated one, the gap's end for a skipped one."""
    first = wall.replace(tzinfo=zone, fold=0)
    instant = first.astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) == wall:
        return instant
    # Skipped by a gap: fold=1 reads it with the offset after the change, which puts it before the
    # change; fold=0, with the offset before, after it. The change is the first second between them
    # whose wall time has reached ``wall``.
    low = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    high = instant
    while high - low > _SECOND:
        middle = whole_seconds(low + (high - low) / 2)
        if _wall(middle, zone) >= wall:
            high = middle
        else:
            low = middle
    return high
