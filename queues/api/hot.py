"""The hot producer calls at the lean edge (taskforge.http.lean): the views' own functions, without DRF.

An enqueue runs on the event loop (``queues.lifecycle.on_loop``) when the
process holds its key and queue and it carries no idempotency key, and is
otherwise one call on the thread pool. A batch enqueue is always one call on
the thread pool: a hundred items' validation and rows would hold the event
loop for milliseconds. A read of one task keeps its long poll
(``wait_seconds``): each attempt runs :func:`queues.api.results.read_task_once`
on the thread pool, and the wait between attempts is ``workers.longpoll``'s
one loop, on the event loop.
"""

from __future__ import annotations

from typing import Any

from queues import lifecycle
from queues.api.lookups import queue_or_404
from queues.api.results import Answer as ReadAnswer
from queues.api.results import read_task_once
from queues.api.views import enqueue_answer, enqueue_batch, enqueue_one, new_task
from queues.apikeys import authorize
from taskforge.http.lean import Answer, InThread, LeanCall, Route
from taskforge.infra import rowcache
from taskforge.infra.postgres import aio
from workers import longpoll


async def _enqueue(call: LeanCall, in_thread: InThread[Any]) -> Answer:
    """``enqueue_one``'s checks in its order; the statement on the event loop when it can run there.

    Authentication and the queue come from this process's copies: when one is
    missing (a key or queue not read yet, or the copies not trusted without
    asking Redis) the whole call goes to the thread pool, where they load.
    A task with an idempotency key needs a transaction of its own: the thread
    pool's, too.
    """
    if not aio.enabled():
        return await in_thread(lambda: _enqueue_in_thread(call))
    try:
        with rowcache.cached_only():
            authorize(call.authorization, call.view_class, call.method)
            queue = queue_or_404(call.params["name"])
    except rowcache.NotCached:
        return await in_thread(lambda: _enqueue_in_thread(call))
    task = new_task(call.json)
    if task.idempotency_key is not None:
        return await in_thread(lambda: enqueue_answer(queue, *lifecycle.enqueue_single(queue, task)))
    return enqueue_answer(queue, await lifecycle.enqueue_on_loop(queue, task), True)


def _enqueue_in_thread(call: LeanCall) -> Answer:
    authorize(call.authorization, call.view_class, call.method)
    return enqueue_one(call.params["name"], call.json)


async def _enqueue_batch(call: LeanCall, in_thread: InThread[Any]) -> Answer:
    def batch() -> Answer:
        authorize(call.authorization, call.view_class, call.method)
        return enqueue_batch(call.params["name"], call.json)

    return await in_thread(batch)


async def _read(call: LeanCall, in_thread: InThread[Any]) -> Answer | None:
    def attempt(kind: str) -> ReadAnswer | longpoll.WaitFor:
        authorize(call.authorization, call.view_class, call.method)
        return read_task_once(call.params.get("name"), call.params["task_id"], call.query, kind)

    return await longpoll.lean_long_poll(call, lambda kind: in_thread(lambda: attempt(kind)))


def routes() -> list[Route]:
    """``POST /queues/{name}/tasks``, its batch form and the reads of one task, as ``queues.api.views`` answers them."""
    return [
        Route("POST", "task-list", _enqueue),
        Route("POST", "task-batch", _enqueue_batch),
        Route("GET", "task-detail", _read),
        Route("GET", "task-by-id", _read),
    ]
