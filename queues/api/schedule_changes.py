"""Creating, changing and deleting schedules (``/schedules``), judged on the merged result.

A PATCH re-reads the row ``FOR UPDATE`` and writes what it names on top of it,
so two concurrent PATCHes both take effect and one that waited for a DELETE
answers 404. Setting ``cron`` or ``every_seconds`` (not null) clears the other
unless the same request sets both; what is left must be exactly one of them.
``next_run_at`` is recomputed from Postgres' now whenever the timing
(``cron``, ``every_seconds``, ``timezone``) or ``paused`` changes.
"""

from __future__ import annotations

import re
from typing import Any

from django.db import IntegrityError, transaction
from psycopg.errors import UniqueViolation
from rest_framework import serializers as drf_serializers

from queues.errors import QueueNotFound, ScheduleNameTaken, ScheduleNotFound
from queues.models import Queue, Schedule
from queues.schedules import planning

# Queue and schedule names alike; anything else (a NUL, which Postgres refuses in text) is simply unknown.
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: What decides ``next_run_at``: a change to any of them recomputes it.
PLANNING_FIELDS = ("cron", "every_seconds", "timezone", "paused")
_EXACTLY_ONE = "Give exactly one of cron and every_seconds (the other null or absent)."


def _queue(name: str) -> Queue:
    queue = Queue.objects.filter(name=name).first() if NAME.fullmatch(name) else None
    if queue is None:
        raise QueueNotFound(name)
    return queue


def check_exactly_one_timing(cron: str | None, every_seconds: int | None) -> None:
    if (cron is None) == (every_seconds is None):
        raise drf_serializers.ValidationError({"cron": [_EXACTLY_ONE], "every_seconds": [_EXACTLY_ONE]})


def create_schedule(fields: dict[str, Any]) -> Schedule:
    """A new schedule from a validated ``POST /schedules`` body: 400, then 404 (queue), then 409 (name)."""
    fields = dict(fields)
    check_exactly_one_timing(fields.get("cron"), fields.get("every_seconds"))
    schedule = Schedule(queue=_queue(fields.pop("queue")), **fields)
    try:
        with transaction.atomic():
            schedule.next_run_at = planning.planned_next_run(schedule)
            schedule.save(force_insert=True)
    except IntegrityError as exc:
        if isinstance(exc.__cause__, UniqueViolation):
            raise ScheduleNameTaken(schedule.name) from None
        raise QueueNotFound(schedule.queue.name) from None  # the queue was deleted meanwhile
    return schedule


def _merge(schedule: Schedule, fields: dict[str, Any]) -> None:
    if fields.get("cron") is not None and "every_seconds" not in fields:
        schedule.every_seconds = None
    if fields.get("every_seconds") is not None and "cron" not in fields:
        schedule.cron = None
    for attr, value in fields.items():
        setattr(schedule, attr, value)


def update_schedule(name: str, fields: dict[str, Any]) -> Schedule:
    """Apply a validated ``PATCH /schedules/{name}`` body under the row lock; returns the schedule as saved."""
    fields = dict(fields)
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update(of=("self",)).filter(name=name).first()
        if schedule is None:
            raise ScheduleNotFound(name)
        before = [getattr(schedule, attr) for attr in PLANNING_FIELDS]
        _merge(schedule, {attr: value for attr, value in fields.items() if attr != "queue"})
        check_exactly_one_timing(schedule.cron, schedule.every_seconds)
        if "queue" in fields:
            schedule.queue = _queue(fields["queue"])
        if [getattr(schedule, attr) for attr in PLANNING_FIELDS] != before:
            schedule.next_run_at = planning.planned_next_run(schedule)
        schedule.save()
    return schedule


def schedule_or_404(name: str) -> Schedule:
    schedule = Schedule.objects.select_related("queue").filter(name=name).first() if NAME.fullmatch(name) else None
    if schedule is None:
        raise ScheduleNotFound(name)
    return schedule


def delete_schedule(name: str) -> None:
    deleted, _ = Schedule.objects.filter(name=name).delete() if NAME.fullmatch(name) else (0, {})
    if not deleted:
        raise ScheduleNotFound(name)
