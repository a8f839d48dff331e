"""Promote due retries back to pending (and into the dispatch lanes)."""

from __future__ import annotations

from django.conf import settings

from queues import lifecycle
from taskforge.loop import LoopCommand

BATCH = 1000


class Command(LoopCommand):
    help = "Run the scheduler loop: promote retry tasks whose backoff has ended."
    loop_name = "scheduler"

    @property
    def interval(self) -> float:  # type: ignore[override]
        return float(settings.TASKFORGE_SCHEDULER_TICK)

    def tick(self) -> int:
        return len(lifecycle.promote_due(BATCH))

    def more_work_pending(self, handled: int) -> bool:
        return handled >= BATCH
