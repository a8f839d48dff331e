"""Firing schedules: due ones enqueue their tasks, a trigger enqueues one now.

Tasks are created by ``queues.lifecycle.enqueue``, as a producer's are (lanes,
doorbells, metrics, logs work the same). A fire's task carries the
idempotency key ``schedule:{name}:{fire time}``: the key, unique per queue,
is what makes a fire time yield one task, whichever process fires it and
however often one crashes and restarts.

Time is Postgres' ``now()``: the due check is in the statement, and the fire
times are computed against the same transaction's ``now()``.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from queues import lifecycle
from queues.errors import IdempotencyConflict
from queues.models import Schedule
from queues.schedules import timing
from queues.schedules.planning import timing_of

logger = logging.getLogger("taskforge.schedules")

FIRE_BATCH = 100

# Due schedules, oldest due first, each locked with its queue's row in key-share mode
# (what the task INSERT's foreign key takes anyway). SKIP LOCKED on both: a schedule
# another process is firing, or whose queue is being changed or deleted, waits for the
# next pass rather than blocking this one. Never waiting is also what keeps this free
# of deadlocks with a queue delete, which locks the queue and then its schedules.
# ``now`` is null in production (Postgres' clock); tests pass one instead of sleeping.
DUE_SCHEDULES = """
SELECT s.id, coalesce(%(now)s::timestamptz, now()) AS db_now
FROM tf_schedule s JOIN tf_queue q ON q.id = s.queue_id
WHERE s.next_run_at <= coalesce(%(now)s::timestamptz, now()) AND NOT s.paused
ORDER BY s.next_run_at
LIMIT %(limit)s
FOR UPDATE OF s SKIP LOCKED
FOR KEY SHARE OF q SKIP LOCKED
"""


@dataclass(frozen=True)
class Fired:
    """What one pass over the due schedules did."""

    schedules: int = 0
    tasks: int = 0


def fire_due(limit: int = FIRE_BATCH, *, now: datetime | None = None) -> Fired:
    """Fire every due schedule (up to ``limit`` of them) in one transaction.

    1. Lock the due schedules (``SKIP LOCKED``: another process has the rest).
    2. For each, the fire times to enqueue (lateness, ``catch_up``), one task per
       fire time, keyed by it.
    3. Advance ``next_run_at`` (and ``last_run_at``, ``last_task_id``) in the same
       transaction: a crash before the commit leaves neither tasks nor an advance,
       and a retry after it finds the schedule no longer due.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(DUE_SCHEDULES, {"limit": limit, "now": now})
            due = cursor.fetchall()
        if not due:
            return Fired()
        clock = due[0][1]
        tasks = 0
        for schedule in Schedule.objects.select_related("queue").filter(id__in=[row[0] for row in due]):
            tasks += _fire(schedule, clock)
    return Fired(schedules=len(due), tasks=tasks)


def _fire(schedule: Schedule, now: datetime) -> int:
    assert schedule.next_run_at is not None  # the due statement only returns scheduled ones
    try:
        plan = timing.due_fires(timing_of(schedule), schedule.next_run_at, now, schedule.catch_up)  # type: ignore[arg-type]
    except ValueError as exc:
        # Only a row written around the API's and the admin's checks gets here; parked, not retried each pass.
        logger.error(
            "schedule %s cannot be fired: %s",
            schedule.name,
            exc,
            extra={"event": "schedule.invalid", "schedule": schedule.name},
        )
        Schedule.objects.filter(pk=schedule.pk).update(next_run_at=None)
        return 0
    if plan.skipped:
        logger.info(
            "schedule %s passed over missed fire times (catch_up %s)",
            schedule.name,
            schedule.catch_up,
            extra={"event": "schedule.skipped", "schedule": schedule.name, "catch_up": schedule.catch_up},
        )
    last_task: uuid.UUID | None = None
    for fire_time in plan.fires:
        task_id = _enqueue_fire(schedule, fire_time)
        last_task = task_id or last_task
    advance: dict[str, Any] = {"next_run_at": plan.next_run_at}
    if plan.fires:
        advance.update(last_run_at=plan.fires[-1], last_task_id=last_task)
    Schedule.objects.filter(pk=schedule.pk).update(**advance)
    return len(plan.fires)


def _enqueue_fire(schedule: Schedule, fire_time: datetime) -> uuid.UUID | None:
    key = timing.fire_key(schedule.name, fire_time)
    # The fingerprint names the fire only: a fire repeated after a PATCH of the payload is still the same fire.
    item = lifecycle.NewTask(
        payload=schedule.payload,
        priority=schedule.priority,
        idempotency_key=key,
        fingerprint=lifecycle.fingerprint({"schedule_fire": key}),
        kind=schedule.kind,
    )
    try:
        ((row, created),) = lifecycle.enqueue(schedule.queue, [item])
    except IdempotencyConflict:
        # A producer enqueued a task of its own under this key: that fire time has its task.
        logger.warning(
            "schedule %s: idempotency key %s is taken by another task",
            schedule.name,
            key,
            extra={"event": "schedule.key_taken", "schedule": schedule.name, "queue": schedule.queue.name},
        )
        return None
    logger.info(
        "schedule %s fired for %s",
        schedule.name,
        fire_time.isoformat(),
        extra={
            "event": "schedule.fired",
            "schedule": schedule.name,
            "queue": schedule.queue.name,
            "fire_time": fire_time.isoformat(),
            "task_id": str(row["id"]),
            "new_task": created,
        },
    )
    return row["id"]  # type: ignore[no-any-return]


def trigger(schedule: Schedule) -> lifecycle.Row:
    """One run of the schedule now (``POST /schedules/{name}/trigger``, the admin's action): its task.

    Not a fire time, so no idempotency key: each trigger is a task of its own.
    The schedule row is not locked first: it is updated after the enqueue, so
    locks are taken queue first, then schedule, as a queue delete takes them.
    """
    with transaction.atomic():
        ((row, _),) = lifecycle.enqueue(
            schedule.queue,
            [lifecycle.NewTask(payload=schedule.payload, priority=schedule.priority, kind=schedule.kind)],
        )
        Schedule.objects.filter(pk=schedule.pk).update(last_run_at=row["created_at"], last_task_id=row["id"])
    logger.info(
        "schedule %s triggered",
        schedule.name,
        extra={
            "event": "schedule.triggered",
            "schedule": schedule.name,
            "queue": schedule.queue.name,
            "task_id": str(row["id"]),
        },
    )
    return row
