"""Expire lapsed leases (failed attempts), prune old finished tasks (queues.loops.watchdog), sample the
queues' history once a minute (queues.loops.history) and keep the event history's daily partitions
(queues.loops.partitions)."""

from __future__ import annotations

import time

from django.conf import settings

from queues.loops import history, partitions, watchdog
from taskforge.infra.loop import LoopCommand

PARTITIONS_EVERY_SECONDS = 60.0


class Command(LoopCommand):
    help = "Run the watchdog loop: reclaim tasks whose lease expired, prune finished tasks."
    loop_name = "watchdog"
    last = watchdog.Sweep(expired=0, pruned=0)
    #: When the next partition round is due (monotonic seconds): the first tick runs one.
    partitions_due = 0.0

    @property
    def interval(self) -> float:  # type: ignore[override]
        return float(settings.TASKFORGE_WATCHDOG_INTERVAL)

    def tick(self) -> int:
        self.last = watchdog.run_once()
        # The same process samples the queues' counters once a minute; bookkeeping, not counted as handled.
        history.run_once()
        # A partition round is a catalog read when nothing is due; once a minute is plenty for
        # days created four days ahead, and a round that waits on a lock costs the tick little.
        if time.monotonic() >= self.partitions_due:
            partitions.run_once()
            self.partitions_due = time.monotonic() + PARTITIONS_EVERY_SECONDS
        return self.last.handled

    def more_work_pending(self, handled: int) -> bool:
        return self.last.full_batch
