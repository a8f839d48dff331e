"""Delayed tasks and retries into the dispatch lanes on time (see queues.loops.scheduler)."""

from __future__ import annotations

import time

from django.conf import settings

from queues.loops import scheduler
from taskforge.infra.loop import LoopCommand

#: The fast tier's period: Redis only, so it can run far more often than the Postgres tick.
FAST_TICK_SECONDS = 0.05


class Command(LoopCommand):
    help = "Run the scheduler loop: promote due retries, move due tasks into the dispatch lanes."
    loop_name = "scheduler"
    interval = FAST_TICK_SECONDS
    _next_slow_tick = 0.0

    def tick(self) -> int:
        handled = 0
        now = time.monotonic()
        if now >= self._next_slow_tick:
            self._next_slow_tick = now + settings.TASKFORGE_SCHEDULER_TICK
            self._promoted = handled = scheduler.slow_tick()
        return handled + scheduler.fast_tick()

    def more_work_pending(self, handled: int) -> bool:
        # A full promotion batch: more retries are due, do the slow tier again at once.
        if getattr(self, "_promoted", 0) >= scheduler.PROMOTE_BATCH:
            self._next_slow_tick = 0.0
            self._promoted = 0
            return True
        return False
