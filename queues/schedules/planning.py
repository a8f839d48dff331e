"""``next_run_at`` outside the loop: on create, on a change of timing, on pause and resume.

While paused a schedule has no ``next_run_at`` (the loop's due scan skips it);
resumed, it plans from now: what it would have fired while paused is not
caught up. Time is Postgres' ``now()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import transaction

from queues.models import Schedule
from queues.schedules import timing
from taskforge.infra.clock import database_now


def timing_of(schedule: Schedule, *, anchor: datetime | None = None) -> timing.Timing:
    """The schedule's timing; an interval's series runs through ``anchor``, else through ``next_run_at``."""
    anchor = anchor or schedule.next_run_at
    return timing.Timing(
        cron=schedule.cron,
        every_seconds=schedule.every_seconds,
        timezone=schedule.timezone,
        anchor=timing.whole_seconds(anchor) if anchor is not None else timing.EPOCH,
    )


def first_fire(schedule: Schedule, now: datetime) -> datetime:
    """The first fire time of a schedule (re)planned at ``now``: the next cron match, or one interval on."""
    if schedule.every_seconds is not None:
        return timing.whole_seconds(now) + timedelta(seconds=schedule.every_seconds)
    return timing.next_fire(timing_of(schedule), now)


def planned_next_run(schedule: Schedule) -> datetime | None:
    """The ``next_run_at`` a schedule gets when created or changed: its first fire time from now, null while paused."""
    if schedule.paused:
        return None
    return first_fire(schedule, database_now())


def upcoming_fires(schedule: Schedule, count: int) -> list[datetime]:
    """The next ``count`` fire times: from ``next_run_at`` on, or as if resumed now for a paused schedule."""
    start = schedule.next_run_at or first_fire(schedule, database_now())
    return [start, *timing.upcoming(timing_of(schedule, anchor=start), start, count - 1)]


def set_paused(schedule_ids: Iterable[object], *, paused: bool) -> list[Schedule]:
    """Pause or resume schedules (the admin's actions); returns the ones that changed, as saved."""
    changed = []
    with transaction.atomic():
        for schedule in Schedule.objects.select_for_update(of=("self",)).filter(pk__in=list(schedule_ids)):
            if schedule.paused == paused:
                continue
            schedule.paused = paused
            schedule.next_run_at = planned_next_run(schedule)
            schedule.save(update_fields=["paused", "next_run_at", "updated_at"])
            changed.append(schedule)
    return changed
