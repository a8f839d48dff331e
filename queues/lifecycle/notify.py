"""What the lifecycle tells the rest of the system once a move is durable.

Both hooks run on commit, never for a rolled-back move. Ready tasks are
announced to ``queues.dispatch`` (Redis lanes, long-poll doorbells) first, so
waiting workers hear at once; ``queues.telemetry.observe`` (JSON log line,
metrics) follows. A crash between the commit and these hooks loses nothing:
Redis is re-derived from Postgres by the loops.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.db import transaction

from queues.dispatch import announce
from queues.lifecycle.rows import Row
from queues.models import Status
from queues.telemetry import observe

#: The statuses a producer waits for: the task ran (or will not run) and its result is known.
SETTLED = frozenset({Status.DONE, Status.DEAD, Status.CANCELLED})


def report_on_commit(moved: list[Row]) -> None:
    """Report moves once they are durable (never for a rolled-back move).

    Register it after any ``announce`` of the same moves: on-commit hooks run
    in order, and waiting workers should hear first, logs and metrics can follow.
    Tasks that settled (done, dead, cancelled) ring their result bells first:
    a producer may be waiting for them (``GET .../tasks/{id}?wait_seconds=N``).
    """
    if moved:
        settled = [row["id"] for row in moved if row["status"] in SETTLED]
        if settled:
            transaction.on_commit(lambda: announce.settled(settled))
        transaction.on_commit(lambda: observe.transitions(moved))


def announce_by_queue(rows: Sequence[Row]) -> None:
    """Announce pending rows that may span queues (promotions, retry now), one call per queue."""
    by_queue: dict[uuid.UUID, list[Row]] = {}
    for row in rows:
        by_queue.setdefault(row["queue_id"], []).append(row)
    for queue_id, queue_rows in by_queue.items():
        announce.announce_ids(queue_id, queue_rows)
