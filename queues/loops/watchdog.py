"""The watchdog: lapsed leases become failed attempts, old finished tasks are pruned.

Both moves belong to the lifecycle (``expire_leases``, ``prune_finished``),
which guards them in Postgres, so several watchdogs may run at once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from queues import lifecycle

logger = logging.getLogger("taskforge.loops.watchdog")

EXPIRE_BATCH = 500
PRUNE_BATCH = 1000


@dataclass(frozen=True)
class Sweep:
    """What one pass did."""

    expired: int
    pruned: int

    @property
    def handled(self) -> int:
        return self.expired + self.pruned

    @property
    def full_batch(self) -> bool:
        """A full batch of either: more is probably waiting, so pass again at once."""
        return self.expired >= EXPIRE_BATCH or self.pruned >= PRUNE_BATCH


def run_once() -> Sweep:
    """Expire up to EXPIRE_BATCH lapsed leases, then prune up to PRUNE_BATCH finished tasks."""
    sweep = Sweep(expired=lifecycle.expire_leases(EXPIRE_BATCH), pruned=lifecycle.prune_finished(PRUNE_BATCH))
    if sweep.expired:
        logger.warning(
            "reclaimed %d task(s) whose lease expired",
            sweep.expired,
            extra={"event": "watchdog.expired", "count": sweep.expired},
        )
    return sweep
