"""Delayed tasks and retries into the dispatch lanes on time (see queues.loops.scheduler)."""

from __future__ import annotations

import time

from django.conf import settings

from queues.loops import scheduler
from taskforge.infra.loop import LoopCommand


class Command(LoopCommand):
    help = "Run the scheduler loop: promote due retries, move due tasks into the dispatch lanes."
    loop_name = "scheduler"
    interval = scheduler.FAST_TICK_SECONDS
    next_slow_tier = 0.0  # time.monotonic() when the Postgres tier is due
    last = scheduler.Pass()

    def tick(self) -> int:
        now = time.monotonic()
        slow = now >= self.next_slow_tier
        if slow:
            self.next_slow_tier = now + settings.TASKFORGE_SCHEDULER_TICK
        self.last = scheduler.run_once(slow=slow)
        return self.last.handled

    def more_work_pending(self, handled: int) -> bool:
        if self.last.full_batch:  # more retries are due: the slow tier again at once
            self.next_slow_tier = 0.0
            return True
        return False
