"""The watchdog: lapsed leases become failed attempts, old finished tasks are pruned.

Both moves belong to the lifecycle (``expire_leases``, ``prune_finished``),
which guards them in Postgres, so several watchdogs may run at once. Workers
not seen for longer than the retention period are forgotten too
(``prune_unseen_workers``), so the worker registry does not grow forever.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from queues import lifecycle

logger = logging.getLogger("taskforge.loops.watchdog")

EXPIRE_BATCH = 500
PRUNE_BATCH = 1000
WORKER_PRUNE_BATCH = 1000


@dataclass(frozen=True)
class Sweep:
    """What one pass did."""

    expired: int
    pruned: int
    workers_forgotten: int = 0

    @property
    def handled(self) -> int:
        return self.expired + self.pruned + self.workers_forgotten

    @property
    def full_batch(self) -> bool:
        """A full batch of any: more is probably waiting, so pass again at once."""
        return (
            self.expired >= EXPIRE_BATCH or self.pruned >= PRUNE_BATCH or self.workers_forgotten >= WORKER_PRUNE_BATCH
        )


def run_once() -> Sweep:
    """Expire up to EXPIRE_BATCH lapsed leases, then prune finished tasks and long-gone workers."""
    sweep = Sweep(
        expired=lifecycle.expire_leases(EXPIRE_BATCH),
        pruned=lifecycle.prune_finished(PRUNE_BATCH),
        workers_forgotten=lifecycle.prune_unseen_workers(WORKER_PRUNE_BATCH),
    )
    if sweep.expired:
        logger.warning(
            "reclaimed %d task(s) whose lease expired",
            sweep.expired,
            extra={"event": "watchdog.expired", "count": sweep.expired},
        )
    return sweep
