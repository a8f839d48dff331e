"""The schedules loop: due periodic schedules enqueue their tasks.

It runs inside the scheduler process (``run_scheduler``, with its Postgres
tier, every ``TASKFORGE_SCHEDULER_TICK``) and on its own as ``run_schedules``.
Any number of copies may run: each pass locks the due schedules with
``SKIP LOCKED`` and advances them in the transaction that enqueues their tasks,
and each task's idempotency key names its fire time, so a fire time yields
one task (``queues.schedules.firing``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from queues.schedules import firing


@dataclass(frozen=True)
class Pass:
    """What one pass of the schedules loop did."""

    #: due schedules handled
    schedules: int = 0
    #: tasks enqueued for their fire times
    tasks: int = 0

    @property
    def handled(self) -> int:
        return self.tasks

    @property
    def full_batch(self) -> bool:
        """As many schedules as one pass takes were due: more may be, so pass again at once."""
        return self.schedules >= firing.FIRE_BATCH


def run_once(*, now: datetime | None = None) -> Pass:
    """One pass: every due schedule fires (``now`` for tests; Postgres' clock otherwise)."""
    fired = firing.fire_due(firing.FIRE_BATCH, now=now)
    return Pass(schedules=fired.schedules, tasks=fired.tasks)
