"""Expire lapsed leases (failed attempts) and prune old finished tasks."""

from __future__ import annotations

import logging

from django.conf import settings

from queues import lifecycle
from taskforge.infra.loop import LoopCommand

EXPIRE_BATCH = 500
PRUNE_BATCH = 1000

# The loop's own logger, at module level: tick() is also called directly (tests, --once),
# before handle() has set self.logger.
logger = logging.getLogger("taskforge.loops.watchdog")


class Command(LoopCommand):
    help = "Run the watchdog loop: reclaim tasks whose lease expired, prune finished tasks."
    loop_name = "watchdog"

    @property
    def interval(self) -> float:  # type: ignore[override]
        return float(settings.TASKFORGE_WATCHDOG_INTERVAL)

    def tick(self) -> int:
        self.last_expired = lifecycle.expire_leases(EXPIRE_BATCH)
        self.last_pruned = lifecycle.prune_finished(PRUNE_BATCH)
        if self.last_expired:
            logger.warning(
                "reclaimed %d task(s) whose lease expired",
                self.last_expired,
                extra={"event": "watchdog.expired", "count": self.last_expired},
            )
        return self.last_expired + self.last_pruned

    def more_work_pending(self, handled: int) -> bool:
        return self.last_expired >= EXPIRE_BATCH or self.last_pruned >= PRUNE_BATCH
