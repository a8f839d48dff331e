"""Expire lapsed leases (failed attempts), prune old finished tasks (queues.loops.watchdog) and sample the
queues' history once a minute (queues.loops.history)."""

from __future__ import annotations

from django.conf import settings

from queues.loops import history, watchdog
from taskforge.infra.loop import LoopCommand


class Command(LoopCommand):
    help = "Run the watchdog loop: reclaim tasks whose lease expired, prune finished tasks."
    loop_name = "watchdog"
    last = watchdog.Sweep(expired=0, pruned=0)

    @property
    def interval(self) -> float:  # type: ignore[override]
        return float(settings.TASKFORGE_WATCHDOG_INTERVAL)

    def tick(self) -> int:
        self.last = watchdog.run_once()
        # The same process samples the queues' counters once a minute; bookkeeping, not counted as handled.
        history.run_once()
        return self.last.handled

    def more_work_pending(self, handled: int) -> bool:
        return self.last.full_batch
