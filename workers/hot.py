"""The single-task worker calls at the lean edge (taskforge.http.lean): the views' own functions, without DRF.

A claim keeps its long poll: each attempt runs :func:`workers.views.claim_once`
on the thread pool, and the wait between attempts is ``workers.longpoll``'s
one loop, on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queues.apikeys import authorize
from taskforge.http.lean import Answer, InThread, LeanCall, Route, in_thread_handler
from workers import longpoll
from workers.views import ReadBody, ack_one, claim_once, heartbeat_one, nack_one


def _authorized(work: Callable[[ReadBody], Answer]) -> Callable[[LeanCall], Answer]:
    def serve(call: LeanCall) -> Answer:
        authorize(call.authorization, call.view_class, call.method)
        return work(call.json)

    return serve


async def _claim(call: LeanCall, in_thread: InThread[Any]) -> Answer | None:
    def attempt(kind: str) -> Answer | longpoll.WaitFor:
        # Each attempt is the whole request again, as at the Django edge: a key
        # revoked while the poll waited is refused.
        authorize(call.authorization, call.view_class, call.method)
        return claim_once(call.json, kind)

    return await longpoll.lean_long_poll(call, in_thread, attempt)


def routes() -> list[Route]:
    """Claim, heartbeat, ack and nack of one task, as ``workers.views`` answers them."""
    return [
        Route("POST", "worker-claim", _claim),
        Route("POST", "worker-heartbeat", in_thread_handler(_authorized(heartbeat_one))),
        Route("POST", "worker-ack", in_thread_handler(_authorized(ack_one))),
        Route("POST", "worker-nack", in_thread_handler(_authorized(nack_one))),
    ]
