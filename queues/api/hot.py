"""The single-task producer calls at the lean edge (taskforge.http.lean): the views' own functions, without DRF.

An enqueue is one call on the thread pool. A read of one task keeps its long
poll (``wait_seconds``): each attempt runs :func:`queues.api.results.read_task_once`
on the thread pool, and the wait between attempts is ``workers.longpoll``'s
one loop, on the event loop.
"""

from __future__ import annotations

from typing import Any

from queues.api.results import Answer as ReadAnswer
from queues.api.results import read_task_once
from queues.api.views import enqueue_one
from queues.apikeys import authorize
from taskforge.http.lean import Answer, InThread, LeanCall, Route, in_thread_handler
from workers import longpoll


def _enqueue(call: LeanCall) -> Answer:
    authorize(call.authorization, call.view_class, call.method)
    return enqueue_one(call.params["name"], call.json)


async def _read(call: LeanCall, in_thread: InThread[Any]) -> Answer | None:
    def attempt(kind: str) -> ReadAnswer | longpoll.WaitFor:
        authorize(call.authorization, call.view_class, call.method)
        return read_task_once(call.params.get("name"), call.params["task_id"], call.query, kind)

    return await longpoll.lean_long_poll(call, in_thread, attempt)


def routes() -> list[Route]:
    """``POST /queues/{name}/tasks`` and the reads of one task, as ``queues.api.views`` answers them."""
    return [
        Route("POST", "task-list", in_thread_handler(_enqueue)),
        Route("GET", "task-detail", _read),
        Route("GET", "task-by-id", _read),
    ]
