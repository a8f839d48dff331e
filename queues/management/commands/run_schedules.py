"""Periodic schedules enqueue their tasks on time (see queues.loops.schedules).

``run_scheduler`` already does this work; this command runs it alone, for a
deployment that wants it in processes of its own.
"""

from __future__ import annotations

from django.conf import settings

from queues.loops import schedules
from taskforge.infra.loop import LoopCommand


class Command(LoopCommand):
    help = "Run the schedules loop: due periodic schedules enqueue their tasks (also part of run_scheduler)."
    loop_name = "schedules"
    last = schedules.Pass()

    @property
    def interval(self) -> float:  # type: ignore[override]
        return float(settings.TASKFORGE_SCHEDULER_TICK)

    def tick(self) -> int:
        self.last = schedules.run_once()
        return self.last.handled

    def more_work_pending(self, handled: int) -> bool:
        return self.last.full_batch
