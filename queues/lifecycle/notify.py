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
from queues.lifecycle.rows import Row, fetch_rows
from queues.lifecycle.statements import MARK_AWAITED
from queues.models import Status
from queues.telemetry import observe

#: The statuses a producer waits for: the task ran (or will not run) and its result is known.
SETTLED = frozenset({Status.DONE, Status.DEAD, Status.CANCELLED})


def awaited_settled(moved: Sequence[Row]) -> list[uuid.UUID]:
    """The tasks among ``moved`` that settled and whose result a request has waited for.

    Only those ring a result bell: a request marks its task ``awaited``
    (:func:`await_result`) before its last look at the task and its wait, so
    the move that settles it after that look returns the mark. Nobody waits
    for most tasks, and their moves then pay no Redis round trip for a bell.
    A row that does not carry the mark rings, as every settled task once did.
    """
    return [row["id"] for row in moved if row["status"] in SETTLED and row.get("awaited", True)]


def await_result(task_id: uuid.UUID) -> None:
    """A request will wait for the task's result: its settling move must ring (see :func:`awaited_settled`).

    The request subscribes to the task's bell first and reads the task after
    this returns (committed): either the move that settles the task comes
    later and sees the mark, or the read sees the task settled.
    """
    fetch_rows(MARK_AWAITED, {"task_id": task_id})


def report_on_commit(moved: list[Row]) -> None:
    """Report moves once they are durable (never for a rolled-back move).

    Register it after any ``announce`` of the same moves: on-commit hooks run
    in order, and waiting workers should hear first, logs and metrics can follow.
    Tasks that settled (done, dead, cancelled) and are awaited ring their result
    bells first: a producer waits for them (``GET .../tasks/{id}?wait_seconds=N``).
    """
    if moved:
        settled = awaited_settled(moved)
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
