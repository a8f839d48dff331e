"""Producers' and operators' cancels: at once for waiting tasks, on request for running ones.

A ``pending`` or ``retry`` task is cancelled at once (``operate.cancel``). A
``claimed`` or ``executing`` one cannot be taken from its worker: it is
marked ``cancel_requested``, its heartbeats say so from then on, and its
attempt's end decides: a nack or a lease expiry makes it ``cancelled`` (no
retry, no DLQ; ``decide.failed_attempt_outcome``), an ack still makes it
``done``. The mark and the end of the attempt lock the same row, so whichever
commits first, the other sees it.
"""

from __future__ import annotations

import logging
import uuid

from django.db import transaction

from queues.errors import InvalidTransition
from queues.lifecycle import cancel_statements
from queues.lifecycle.operate import cancel
from queues.lifecycle.reads import get_task
from queues.lifecycle.rows import Row, fetch_rows
from queues.models import LEASED, Queue, Status

logger = logging.getLogger("taskforge.transitions")

# A task may move between the two statements (claimed meanwhile, or nacked back to
# retry); each pass re-reads its state, and a few passes settle any such race.
_PASSES = 3


def request_cancel(queue: Queue, task_id: uuid.UUID) -> Row:
    """Mark a ``claimed`` or ``executing`` task as asked to stop; ``InvalidTransition`` for any other state."""
    with transaction.atomic():
        marked = fetch_rows(cancel_statements.REQUEST_CANCEL, {"queue_id": queue.id, "task_id": task_id})
    if not marked:
        current = get_task(queue, task_id)
        raise InvalidTransition(
            f"task {task_id} is {current['status']}; only claimed and executing tasks can be asked to stop"
        )
    logger.info(
        "task %s cancel requested in %s",
        task_id,
        queue.name,
        extra={"event": "task.cancel_requested", "task_id": str(task_id), "queue": queue.name},
    )
    return marked[0]


def cancel_or_request(queue: Queue, task_id: uuid.UUID) -> tuple[Row, bool]:
    """Cancel the task: ``(task, True)`` when it was cancelled at once, ``(task, False)`` when asked to stop.

    ``TaskNotFound`` for a task the queue does not have; ``InvalidTransition``
    for one already ``done``, ``dead`` or ``cancelled``.
    """
    status = ""
    for _ in range(_PASSES):
        try:
            return cancel(queue, task_id), True
        except InvalidTransition:
            pass
        try:
            return request_cancel(queue, task_id), False
        except InvalidTransition:
            status = get_task(queue, task_id)["status"]
            if status not in (Status.PENDING, Status.RETRY, *LEASED):
                break
    raise InvalidTransition(
        f"task {task_id} is {status}; only pending, retry, claimed and executing tasks can be cancelled"
    )
