"""Moves made for producers, operators and the maintenance loops, not under a lease.

Promote due retries (scheduler), retry now (dashboard), cancel and purge
(producers, operators), replay and discard dead tasks (DLQ), delete a queue,
prune finished tasks (watchdog; their history goes with its partitions). Each move is one guarded statement; a
refused single-task move is explained by ``queues.lifecycle.reads``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from functools import partial

from django.conf import settings
from django.db import transaction

from queues.dispatch import announce
from queues.errors import InvalidTransition, QueueNotEmpty, TaskNotFound
from queues.lifecycle import bulk_statements, statements
from queues.lifecycle.notify import announce_by_queue, report_on_commit
from queues.lifecycle.reads import dead_letter_exists, get_task
from queues.lifecycle.rows import Row, fetch_rows
from queues.models import Queue
from queues.telemetry import observe

# --- retry -> pending -----------------------------------------------------------------------


def promote_due(limit: int = 1000, *, horizon_seconds: float = 0.0) -> list[Row]:
    """Move ``retry`` tasks due within ``horizon_seconds`` back to ``pending``.

    A promoted task keeps its ``scheduled_at``, so it is claimable exactly when
    its backoff ends and not before: promoting slightly early only moves it
    into the ready set in time.
    """
    with transaction.atomic():
        moved = fetch_rows(
            statements.PROMOTE_DUE, {"limit": limit, "horizon": horizon_seconds, "event_kind": "transition"}
        )
        transaction.on_commit(lambda: announce_by_queue(moved))
        report_on_commit(moved)
    return moved


def retry_now(task_ids: Sequence[uuid.UUID], *, actor: str | None = None) -> list[Row]:
    """Move the given ``retry`` tasks to ``pending`` now; tasks in other states are skipped."""
    with transaction.atomic():
        moved = fetch_rows(
            statements.RETRY_NOW,
            {
                "task_ids": list(task_ids),
                "detail": f"retried now by {actor}" if actor else "retried now",
                "event_kind": "transition",
            },
        )
        transaction.on_commit(lambda: announce_by_queue(moved))
        report_on_commit(moved)
    return moved


# --- cancel, purge --------------------------------------------------------------------------


def cancel(queue: Queue, task_id: uuid.UUID) -> Row:
    """Cancel one pending or retry task; ``InvalidTransition`` for any other state."""
    with transaction.atomic():
        moved = fetch_rows(
            statements.CANCEL_ONE,
            {"queue_id": queue.id, "task_id": task_id, "detail": "cancelled", "event_kind": "transition"},
        )
        if not moved:
            current = get_task(queue, task_id)
            raise InvalidTransition(
                f"task {task_id} is {current['status']}; only pending and retry tasks can be cancelled"
            )
        report_on_commit(moved)
    return moved[0]


# Tasks one bulk statement (purge, queue deletion) handles; each batch is its own transaction.
BULK_BATCH = 1000


def purge(queue: Queue, *, batch: int = BULK_BATCH) -> int:
    """Cancel every pending and retry task of the queue, in committed batches; returns how many.

    Not one transaction: a huge queue never holds every row lock at once, and
    no payload is read. A task enqueued while the purge runs may or may not be
    cancelled; a task claimed meanwhile is left to its worker.
    """
    total = 0
    while True:
        with transaction.atomic():
            moved = fetch_rows(
                bulk_statements.PURGE_BATCH,
                {"queue_id": queue.id, "limit": batch, "detail": "purged", "event_kind": "transition"},
            )
            report_on_commit(moved)
        total += len(moved)
        # A batch can come back short while tasks remain (a candidate claimed under
        # our feet is skipped), so only an empty batch ends the purge.
        if not moved:
            return total


# --- dead letters: replay, discard ----------------------------------------------------------


def replay(queue: Queue, task_id: uuid.UUID, *, actor: str | None = None) -> Row:
    """Put one dead task back to pending with a fresh attempt budget."""
    with transaction.atomic():
        moved = fetch_rows(
            statements.REPLAY_ONE,
            {
                "queue_id": queue.id,
                "task_id": task_id,
                "limit": 1,
                "detail": _replay_detail(actor),
                "event_kind": "transition",
            },
        )
        if not moved:
            if not dead_letter_exists(queue, task_id):
                raise TaskNotFound(task_id)
            raise InvalidTransition(f"task {task_id} is not dead; only dead tasks can be replayed")
        transaction.on_commit(lambda: announce.announce(queue, moved))
        report_on_commit(moved)
    return moved[0]


def replay_many(
    queue: Queue, task_ids: Iterable[uuid.UUID] | None = None, *, actor: str | None = None, batch: int = 1000
) -> int:
    """Replay the given dead tasks (or all of the queue's); others are skipped."""
    total = 0
    ids = None if task_ids is None else list(task_ids)
    sql = statements.REPLAY_ALL if ids is None else statements.REPLAY_SOME
    while True:
        with transaction.atomic():
            moved = fetch_rows(
                sql,
                {
                    "queue_id": queue.id,
                    "task_ids": ids,
                    "limit": batch,
                    "detail": _replay_detail(actor),
                    "event_kind": "transition",
                },
            )
            if moved:
                transaction.on_commit(partial(announce.announce, queue, moved))  # this round's rows
            report_on_commit(moved)
        total += len(moved)
        if len(moved) < batch:  # replayed rows are no longer dead: each round takes new ones
            return total


def _replay_detail(actor: str | None) -> str:
    return f"replayed by {actor}" if actor else "replayed"


def discard(queue: Queue, task_id: uuid.UUID) -> None:
    """Remove a dead task and its DLQ entry for good."""
    if discard_many(queue, [task_id]) == 0:
        if not dead_letter_exists(queue, task_id):
            raise TaskNotFound(task_id)
        raise InvalidTransition(f"task {task_id} is not dead; only dead tasks can be discarded")


def discard_many(queue: Queue, task_ids: Sequence[uuid.UUID]) -> int:
    """Remove the given dead tasks of the queue for good; others are skipped. Returns how many."""
    with transaction.atomic():
        gone = fetch_rows(statements.DISCARD, {"queue_id": queue.id, "task_ids": list(task_ids)})
    observe.discarded(queue, len(gone))
    return len(gone)


# --- queue deletion and retention -----------------------------------------------------------


def delete_queue(queue: Queue, *, batch: int = BULK_BATCH) -> None:
    """Delete a queue that holds only finished history (done, cancelled).

    The history goes first in committed batches, then the queue row with what
    is left under its lock. A task enqueued meanwhile makes it a 409 with the
    queue kept (the history deleted by then stays deleted: it was going anyway).
    """
    _refuse_if_blocked(queue)
    while True:
        with transaction.atomic():
            gone = fetch_rows(bulk_statements.DELETE_QUEUE_FINISHED_BATCH, {"queue_id": queue.id, "limit": batch})
        if len(gone) < batch:
            break
    with transaction.atomic():
        # Lock the queue row so no enqueue slips in between the check and the delete.
        locked = Queue.objects.select_for_update().filter(pk=queue.pk).first()
        if locked is None:
            return
        _refuse_if_blocked(queue)
        fetch_rows(statements.DELETE_QUEUE_EVENTS, {"queue_id": queue.id})
        fetch_rows(statements.DELETE_QUEUE_DEAD_LETTERS, {"queue_id": queue.id})
        fetch_rows(statements.DELETE_QUEUE_TASKS, {"queue_id": queue.id})
        locked.delete()
    transaction.on_commit(lambda: announce.forget(queue))


def _refuse_if_blocked(queue: Queue) -> None:
    (blocking,) = fetch_rows(statements.COUNT_BLOCKING, {"queue_id": queue.id})
    if blocking["n"]:
        raise QueueNotEmpty(queue.name, blocking["n"])


def prune_finished(limit: int = 1000) -> int:
    """Delete one batch of done/cancelled tasks past the retention period (their events stay for
    their day's partition to take: ``queues.partitions``)."""
    with transaction.atomic():
        return len(fetch_rows(statements.PRUNE_FINISHED, {"days": settings.TASKFORGE_RETENTION_DAYS, "limit": limit}))


def prune_unseen_workers(limit: int = 1000) -> int:
    """Forget one batch of workers not seen for longer than the retention period."""
    with transaction.atomic():
        params = {"days": settings.TASKFORGE_RETENTION_DAYS, "limit": limit}
        return len(fetch_rows(bulk_statements.PRUNE_UNSEEN_WORKERS, params))
