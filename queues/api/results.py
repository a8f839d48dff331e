"""Reading a task, and waiting for its result: ``GET /queues/{name}/tasks/{id}`` and ``GET /tasks/{id}``.

A read is an attempt of ``workers.longpoll``'s one wait loop, as a claim is:
:func:`read_task_once` answers the task (with its history) when it is
settled (``done``, ``dead``, ``cancelled``), when no ``wait_seconds`` was
asked, or when the wait is over; otherwise it answers what to wait for, and
the loop waits on the event loop, holding no thread and no database
connection, until the task's bell rings (``queues.lifecycle.notify`` rings it
after the commit that settles it), a re-check timer fires, or the wait ends.
The attempts after the first mark the task awaited before they read it
(``lifecycle.await_result``): only an awaited task's settling move rings.
The DRF views, the ASGI edge and the lean edge (``queues.api.hot``) all run
this one function.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queues import lifecycle
from queues.api import outputs
from queues.api.lookups import queue_or_404, task_id_or_404
from queues.lifecycle.notify import SETTLED
from queues.models import TaskEvent
from queues.telemetry.observe import queue_name as name_of_queue
from taskforge.http.pagination import QueryParams
from workers import longpoll

READ_PARAMS = frozenset({"wait_seconds"})
#: The longest a read may wait for a result, as for a claim.
MAX_WAIT_SECONDS = 30

#: A read's answer: its status and body.
Answer = tuple[int, dict[str, Any]]


def with_history(row: Mapping[str, Any], queue_name: str) -> dict[str, Any]:
    """The task object with ``history``: its status transitions, oldest first."""
    events = TaskEvent.objects.filter(task_id=row["id"], kind=TaskEvent.Kind.TRANSITION).order_by("at", "id")
    body = outputs.task(row, queue_name)
    body["history"] = [outputs.history_entry(event) for event in events.values()]
    return body


def read_task_once(
    queue_name: str | None, raw_task_id: str, query: Mapping[str, str], attempt: str | None
) -> Answer | longpoll.WaitFor:
    """One attempt of a task read; ``queue_name`` None: whatever the task's queue.

    An unknown queue or a malformed or unknown id is a 404, a malformed
    ``wait_seconds`` (or any other query parameter) a 400, checked on every
    attempt as the claim checks its body.
    """
    queue = queue_or_404(queue_name) if queue_name is not None else None
    task_id = task_id_or_404(raw_task_id)
    wait_seconds = QueryParams(query, READ_PARAMS).integer("wait_seconds", 0, MAX_WAIT_SECONDS, default=0)
    if wait_seconds and attempt == longpoll.AGAIN:
        # Subscribed to the task's bell now: the move that settles it from here on rings it.
        lifecycle.await_result(task_id)
    row = lifecycle.get_task(queue, task_id) if queue is not None else lifecycle.get_task_anywhere(task_id)
    if row["status"] in SETTLED or not wait_seconds or attempt == longpoll.LAST:
        return 200, with_history(row, queue.name if queue is not None else name_of_queue(row["queue_id"]))
    return longpoll.WaitFor(queue=None, max_tasks=0, wait_seconds=wait_seconds, task_id=str(task_id))
