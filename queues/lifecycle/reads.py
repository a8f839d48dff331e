"""Reads the moves use: a task for the API, and why a guarded move was refused.

A guarded statement that moves nothing does not say why; these reads tell a
missing task (404) from one in the wrong state or under someone else's lease
(409), after the fact and without locks, which is all an error answer needs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from queues.errors import LeaseLost, TaskNotFound
from queues.lifecycle import read_statements
from queues.lifecycle.rows import Row, fetch_rows
from queues.models import Queue


def get_task(queue: Queue, task_id: uuid.UUID) -> Row:
    """One task of ``queue``; ``TaskNotFound`` if the queue has no such task."""
    rows = fetch_rows(read_statements.TASK_IN_QUEUE, {"task_id": task_id, "queue_id": queue.id})
    if not rows:
        raise TaskNotFound(task_id)
    return rows[0]


def get_task_anywhere(task_id: uuid.UUID) -> Row:
    """One task, whatever its queue; ``TaskNotFound`` if there is no such task."""
    rows = fetch_rows(read_statements.TASKS_BY_IDS, {"task_ids": [task_id]})
    if not rows:
        raise TaskNotFound(task_id)
    return rows[0]


def tasks_by_id(task_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Row]:
    """The current rows of the given tasks (missing ids are absent)."""
    rows = fetch_rows(read_statements.TASKS_BY_IDS, {"task_ids": list(task_ids)})
    return {row["id"]: row for row in rows}


def not_held(task_id: uuid.UUID) -> Exception:
    """The error for a lease move that moved nothing: ``LeaseLost`` if the task exists."""
    exists = fetch_rows(read_statements.TASK_EXISTS, {"task_id": task_id})
    return LeaseLost(task_id) if exists else TaskNotFound(task_id)


def dead_letter_exists(queue: Queue, task_id: uuid.UUID) -> bool:
    """Whether ``queue`` has a DLQ entry for the task (a refused replay is then a 409, not a 404)."""
    return bool(fetch_rows(read_statements.DEAD_LETTER_EXISTS, {"task_id": task_id, "queue_id": queue.id}))
