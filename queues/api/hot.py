"""The enqueue of one task at the lean edge (taskforge.http.lean): the view's own function, without DRF."""

from __future__ import annotations

from queues.api.views import enqueue_one
from queues.apikeys import authorize
from taskforge.http.lean import Answer, LeanCall, Route, in_thread_handler


def _enqueue(call: LeanCall) -> Answer:
    authorize(call.authorization, call.view_class, call.method)
    return enqueue_one(call.params["name"], call.json)


def routes() -> list[Route]:
    """``POST /queues/{name}/tasks``, as ``queues.api.views.TaskListView`` answers it."""
    return [Route("POST", "task-list", in_thread_handler(_enqueue))]
