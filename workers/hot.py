"""The worker calls at the lean edge (taskforge.http.lean): the views' own functions, without DRF.

A claim of up to ``LOOP_CLAIM_MAX_TASKS`` tasks from one named pull queue
with no rate limit (a larger one once its long poll waited, from a lane
that short), a heartbeat, an ack and a nack run on the event loop
(``queues.lifecycle.lease_on_loop``) when the process holds the call's key,
queue and the workers' controls (an ack or a nack, whose answer carries
none, needs only the key), and this worker's "last seen" is not due to be
written; otherwise the call is one call on the thread pool, as before. The
checks are the views' own functions (``workers.views``), in their order; a
call leaves the loop for the thread pool only before it has changed
anything, or after a heartbeat, ack or nack that moved nothing (the thread
pool then tells which error it is).

A claim keeps its long poll: each attempt is the whole request again, and
the wait between attempts is ``workers.longpoll``'s one loop.

The acks and nacks of several tasks (``/workers/ack/batch``,
``/workers/nack/batch``: what the reference worker sends at its defaults)
are always one call on the thread pool, as a batch enqueue is: the edge
spares them Django's middleware and DRF's dispatch, not the thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queues import lifecycle
from queues.apikeys import authorize
from queues.dispatch import claiming
from taskforge.http.lean import Answer, InThread, LeanCall, Route
from taskforge.infra import rowcache
from taskforge.infra.postgres import aio
from workers import controls, longpoll, registry
from workers.inputs import AckSerializer, HeartbeatSerializer, LeaseItemSerializer, NackSerializer, validate_lease_call
from workers.views import (
    ReadBody,
    ack_batch,
    ack_one,
    claim_once,
    claim_outcome,
    claim_request,
    controlled,
    heartbeat_answer,
    heartbeat_one,
    nack_batch,
    nack_item_of,
    nack_one,
    task_answer,
)

#: The most tasks a claim takes on the event loop. A claim's rows, log lines and answer are CPU the
#: loop spends without serving anything else; a batch claim spreads its round trips over its tasks
#: anyway, and on the thread pool it leaves the loop free (make bench: W3b, a producer's batches
#: while two workers drain, came out 10-20 % slower with every claim on the loop). A larger claim
#: stays on the loop when its long poll waited and its lane holds no more than this: a trickle,
#: where the worker waits on each task and the thread hand-off's wake-ups are a millisecond or
#: two of each task's start. (Taking every short lane on the loop, the drain's first attempts
#: included, made W3b slower again.)
LOOP_CLAIM_MAX_TASKS = 10


def _authorized(work: Callable[[ReadBody], Answer]) -> Callable[[LeanCall], Answer]:
    def serve(call: LeanCall) -> Answer:
        authorize(call.authorization, call.view_class, call.method)
        return work(call.json)

    return serve


async def _claim(call: LeanCall, in_thread: InThread[Any]) -> Answer | None:
    def attempt_in_thread(kind: str) -> Answer | longpoll.WaitFor:
        # Each attempt is the whole request again, as at the Django edge: a key
        # revoked while the poll waited is refused.
        authorize(call.authorization, call.view_class, call.method)
        return claim_once(call.json, kind)

    async def attempt(kind: str) -> Answer | longpoll.WaitFor:
        outcome = await _claim_on_loop(call, kind)
        return await in_thread(lambda: attempt_in_thread(kind)) if outcome is None else outcome

    return await longpoll.lean_long_poll(call, attempt)


async def _claim_on_loop(call: LeanCall, kind: str) -> Answer | longpoll.WaitFor | None:
    """:func:`workers.views.claim_once` on the event loop; None when it belongs on the thread pool."""
    if not aio.enabled():
        return None
    try:
        with rowcache.cached_only():
            authorize(call.authorization, call.view_class, call.method)
            fields, queue = claim_request(call.json)
            control = controls.control_for(fields["worker_id"])
    except rowcache.NotCached:
        return None
    if (
        queue is None
        or queue.rate_limit is not None
        or (fields["max_tasks"] > LOOP_CLAIM_MAX_TASKS and kind == longpoll.FIRST)
        or registry.seen_is_due(fields["worker_id"], claim=True)
    ):
        return None  # several queues, tokens to take, a batch, or a registry row to write: the thread path's
    if control is not None:
        return controlled(control)
    rows = await claiming.claim_one_queue_on_loop(
        fields["worker_id"], queue, fields["max_tasks"], most_on_loop=LOOP_CLAIM_MAX_TASKS
    )
    return None if rows is None else claim_outcome(fields, rows, kind)  # None: a batch, the thread path's


def _warm(
    call: LeanCall, serializer: type[LeaseItemSerializer], *, with_control: bool, **seen: bool
) -> tuple[dict[str, Any], str | None] | None:
    """A heartbeat's, ack's or nack's fields (and, ``with_control``, the worker's control) when it can run on the loop.

    None when it belongs on the thread pool: no loop pool, a key or control
    this process has not read yet, or the worker's "last seen" row due. An
    ack's or nack's answer carries no control, so it does not look one up.
    """
    if not aio.enabled():
        return None
    try:
        with rowcache.cached_only():
            authorize(call.authorization, call.view_class, call.method)
            fields = validate_lease_call(serializer, call.json())
            control = controls.control_for(fields["worker_id"]) if with_control else None
    except rowcache.NotCached:
        return None
    if registry.seen_is_due(fields["worker_id"], **seen):
        return None
    return fields, control


async def _heartbeat(call: LeanCall, in_thread: InThread[Any]) -> Answer:
    """:func:`workers.views.heartbeat_one` on the event loop when it can run there."""
    warm = _warm(call, HeartbeatSerializer, with_control=True, heartbeat=True)
    if warm is not None:
        fields, control = warm
        row = await lifecycle.heartbeat_on_loop(
            fields["task_id"],
            worker_id=fields["worker_id"],
            lease_token=fields["lease_token"],
            progress=fields["progress"],
        )
        if row is not None:
            return heartbeat_answer(row, control)
    answer: Answer = await in_thread(lambda: _authorized(heartbeat_one)(call))
    return answer


async def _nack(call: LeanCall, in_thread: InThread[Any]) -> Answer:
    """:func:`workers.views.nack_one` on the event loop when it can run there."""
    warm = _warm(call, NackSerializer, with_control=False)
    if warm is not None:
        fields, _ = warm
        row = await lifecycle.nack_on_loop(nack_item_of(fields), worker_id=fields["worker_id"])
        if row is not None:
            return task_answer(row)
    answer: Answer = await in_thread(lambda: _authorized(nack_one)(call))
    return answer


async def _ack(call: LeanCall, in_thread: InThread[Any]) -> Answer:
    """:func:`workers.views.ack_one` on the event loop when it can run there."""
    warm = _warm(call, AckSerializer, with_control=False)
    if warm is not None:
        fields, _ = warm
        row = await lifecycle.ack_on_loop(
            fields["task_id"], worker_id=fields["worker_id"], lease_token=fields["lease_token"], result=fields["result"]
        )
        if row is not None:
            return task_answer(row)
    answer: Answer = await in_thread(lambda: _authorized(ack_one)(call))
    return answer


async def _ack_batch(call: LeanCall, in_thread: InThread[Any]) -> Answer:
    answer: Answer = await in_thread(lambda: _authorized(ack_batch)(call))
    return answer


async def _nack_batch(call: LeanCall, in_thread: InThread[Any]) -> Answer:
    answer: Answer = await in_thread(lambda: _authorized(nack_batch)(call))
    return answer


def routes() -> list[Route]:
    """Claim, heartbeat, ack and nack of one task, acks and nacks of several, as ``workers.views`` answers them."""
    return [
        Route("POST", "worker-claim", _claim),
        Route("POST", "worker-heartbeat", _heartbeat),
        Route("POST", "worker-ack", _ack),
        Route("POST", "worker-ack-batch", _ack_batch),
        Route("POST", "worker-nack", _nack),
        Route("POST", "worker-nack-batch", _nack_batch),
    ]
