"""Delayed tasks and retries into the dispatch lanes on time, periodic schedules fired.

See queues.loops.scheduler and queues.loops.schedules: the schedules run with
the Postgres tier, every ``TASKFORGE_SCHEDULER_TICK``.
"""

from __future__ import annotations

import time

from django.conf import settings

from queues.loops import scheduler, schedules
from taskforge.infra.loop import LoopCommand


class Command(LoopCommand):
    help = (
        "Run the scheduler loop: promote due retries, move due tasks into the dispatch lanes, "
        "fire due periodic schedules."
    )
    loop_name = "scheduler"
    interval = scheduler.FAST_TICK_SECONDS
    next_slow_tier = 0.0  # time.monotonic() when the Postgres tier is due
    last = scheduler.Pass()
    last_schedules = schedules.Pass()

    def tick(self) -> int:
        now = time.monotonic()
        slow = now >= self.next_slow_tier
        if slow:
            self.next_slow_tier = now + settings.TASKFORGE_SCHEDULER_TICK
        self.last = scheduler.run_once(slow=slow)
        self.last_schedules = schedules.run_once() if slow else schedules.Pass()
        return self.last.handled + self.last_schedules.handled

    def more_work_pending(self, handled: int) -> bool:
        # More retries or schedules are due: the slow tier again at once.
        if self.last.full_batch or self.last_schedules.full_batch:
            self.next_slow_tier = 0.0
            return True
        return False
