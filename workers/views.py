"""The worker protocol: claim, heartbeat, ack, nack (single and batch), listing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.http import HttpResponse
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from queues import lifecycle
from queues.api import outputs
from queues.api.lookups import queue_or_404
from queues.apikeys import Role
from queues.dispatch import claiming
from queues.errors import PushQueueNotClaimable
from queues.models import Queue
from queues.telemetry.observe import queue_name
from taskforge.http.errors import error_body
from taskforge.ops import audit
from workers import controls, longpoll, openapi, registry
from workers.inputs import (
    AckBatchSerializer,
    AckSerializer,
    HeartbeatSerializer,
    NackBatchSerializer,
    NackSerializer,
    validate_claim,
    validate_lease_batch,
    validate_lease_call,
)
from workers.longpoll import LongPollView


def _task(row: dict[str, Any]) -> dict[str, Any]:
    return outputs.task(row, queue_name(row["queue_id"]))


def _batch_result(task_id: Any, outcome: Any) -> dict[str, Any]:
    if isinstance(outcome, Exception):
        return {"task_id": task_id, **error_body(outcome.code, outcome.message)}  # type: ignore[attr-defined]
    return {"task_id": task_id, "status": outcome["status"]}


def _claimed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tasks": [outputs.task(row, queue_name(row["queue_id"]), with_lease=True) for row in rows]}


#: What a single-task call's core answers: its status and JSON-able body.
Answer = tuple[int, dict[str, Any]]
#: Gives the request's parsed JSON body (read after authentication, as DRF reads ``request.data``).
ReadBody = Callable[[], Any]

# The single-task calls below are each one function, called by the DRF view and
# by the lean edge (workers.hot) alike, after authentication.


def claim_once(read_body: ReadBody, attempt: str | None) -> Answer | longpoll.WaitFor:
    """One attempt of ``POST /workers/claim`` (``attempt``: which one, see workers.longpoll).

    An attempt that finds nothing while the poll may still wait answers what
    to wait for instead; the poll waits on the doorbell and asks again.
    """
    fields, queue = claim_request(read_body)
    registry.seen(fields["worker_id"], claim=True)
    control = controls.control_for(fields["worker_id"])
    if control is not None:
        return controlled(control)
    claimed = claiming.claim(fields["worker_id"], queue, fields["max_tasks"])
    return claim_outcome(fields, claimed.rows, attempt, claimed.retry_after)


def claim_request(read_body: ReadBody) -> tuple[dict[str, Any], Queue | None]:
    """A claim's fields and its queue (None: every queue), refused as :func:`claim_once` refuses them."""
    fields = validate_claim(read_body())
    queue = queue_or_404(fields["queue"]) if fields["queue"] is not None else None
    if queue is not None and queue.push is not None:
        raise PushQueueNotClaimable(queue.name)
    return fields, queue


def controlled(control: str) -> Answer:
    """A quiet or stopping worker's claim: nothing more for it, and no wait (each attempt of a poll asks)."""
    return 200, {"tasks": [], "control": control}


def claim_outcome(
    fields: dict[str, Any], rows: list[dict[str, Any]], attempt: str | None, retry_after: float | None = None
) -> Answer | longpoll.WaitFor:
    """The claimed tasks, or, when none and the poll may still wait, what to wait for."""
    if rows or not fields["wait_seconds"] or attempt == longpoll.LAST:
        return 200, _claimed(rows)
    return longpoll.WaitFor(fields["queue"], fields["max_tasks"], fields["wait_seconds"], retry_after)


def heartbeat_one(read_body: ReadBody) -> Answer:
    """``POST /workers/heartbeat``."""
    fields = validate_lease_call(HeartbeatSerializer, read_body())
    registry.seen(fields["worker_id"], heartbeat=True)
    row = lifecycle.heartbeat(
        fields["task_id"], worker_id=fields["worker_id"], lease_token=fields["lease_token"], progress=fields["progress"]
    )
    return heartbeat_answer(row, controls.control_for(fields["worker_id"]))


def heartbeat_answer(row: dict[str, Any], control: str | None) -> Answer:
    """A held lease's heartbeat answer; ``control`` only when an operator asked (else as it always was)."""
    answer = {
        "task_id": row["id"],
        "status": row["status"],
        "lease_expires_at": row["lease_expires_at"],
        # True once a producer asked to stop the task: the worker should stop and nack.
        "cancel_requested": row["cancel_requested"],
    }
    if control is not None:
        answer["control"] = control
    return 200, answer


def ack_one(read_body: ReadBody) -> Answer:
    """``POST /workers/ack``."""
    fields = validate_lease_call(AckSerializer, read_body())
    registry.seen(fields["worker_id"])
    row = lifecycle.ack(
        fields["task_id"],
        worker_id=fields["worker_id"],
        lease_token=fields["lease_token"],
        result=fields["result"],
    )
    return task_answer(row)


def task_answer(row: dict[str, Any]) -> Answer:
    """An ack's or a nack's answer: the task as the move left it."""
    return 200, _task(row)


def nack_one(read_body: ReadBody) -> Answer:
    """``POST /workers/nack``."""
    fields = validate_lease_call(NackSerializer, read_body())
    registry.seen(fields["worker_id"])
    return task_answer(lifecycle.nack_item(nack_item_of(fields), worker_id=fields["worker_id"]))


def ack_batch(read_body: ReadBody) -> Answer:
    """``POST /workers/ack/batch``: each item's outcome in order, a refused item beside the acked ones."""
    fields = validate_lease_batch(AckBatchSerializer, read_body())
    registry.seen(fields["worker_id"])
    items = [lifecycle.AckItem(i["task_id"], i["lease_token"], i["result"]) for i in fields["items"]]
    return _batch_answer(items, lifecycle.ack_many(fields["worker_id"], items))


def nack_batch(read_body: ReadBody) -> Answer:
    """``POST /workers/nack/batch``, as :func:`ack_batch`."""
    fields = validate_lease_batch(NackBatchSerializer, read_body())
    registry.seen(fields["worker_id"])
    items = [
        lifecycle.NackItem(
            i["task_id"], i["error"], i["lease_token"], i["retry"], i["retry_after_seconds"], i["release"]
        )
        for i in fields["items"]
    ]
    return _batch_answer(items, lifecycle.nack_many(fields["worker_id"], items))


def _batch_answer(items: Sequence[lifecycle.AckItem | lifecycle.NackItem], outcomes: list[Any]) -> Answer:
    results = [_batch_result(item.task_id, outcome) for item, outcome in zip(items, outcomes, strict=True)]
    return 200, {"results": results}


def nack_item_of(fields: dict[str, Any]) -> lifecycle.NackItem:
    """The move a nack's validated fields ask for."""
    return lifecycle.NackItem(
        fields["task_id"],
        fields["error"],
        lease_token=fields["lease_token"],
        retry=fields["retry"],
        retry_after_seconds=fields["retry_after_seconds"],
        release=fields["release"],
    )


@openapi.claim_schema
class ClaimView(LongPollView):
    """One claim attempt (:func:`claim_once`): it never waits itself (see workers.longpoll)."""

    roles = {"POST": Role.WORKER}

    def post(self, request: Request) -> Response | HttpResponse:
        outcome = claim_once(lambda: request.data, longpoll.attempt(request))
        if isinstance(outcome, longpoll.WaitFor):
            return longpoll.must_wait(outcome)
        status, body = outcome
        return Response(body, status=status)


@openapi.heartbeat_schema
class HeartbeatView(APIView):
    roles = {"POST": Role.WORKER}

    def post(self, request: Request) -> Response:
        status, body = heartbeat_one(lambda: request.data)
        return Response(body, status=status)


@openapi.ack_schema
class AckView(APIView):
    roles = {"POST": Role.WORKER}

    def post(self, request: Request) -> Response:
        status, body = ack_one(lambda: request.data)
        return Response(body, status=status)


@openapi.nack_schema
class NackView(APIView):
    roles = {"POST": Role.WORKER}

    def post(self, request: Request) -> Response:
        status, body = nack_one(lambda: request.data)
        return Response(body, status=status)


@openapi.ack_batch_schema
class AckBatchView(APIView):
    roles = {"POST": Role.WORKER}

    def post(self, request: Request) -> Response:
        status, body = ack_batch(lambda: request.data)
        return Response(body, status=status)


@openapi.nack_batch_schema
class NackBatchView(APIView):
    roles = {"POST": Role.WORKER}

    def post(self, request: Request) -> Response:
        status, body = nack_batch(lambda: request.data)
        return Response(body, status=status)


@openapi.worker_list_schema
class WorkerListView(APIView):
    roles = {"GET": Role.ADMIN}

    def get(self, request: Request) -> Response:
        return Response({"results": [_worker(w) for w in registry.active_workers()]})


def _worker(row: dict[str, Any]) -> dict[str, Any]:
    worker = {
        "worker_id": row["worker_id"],
        "last_seen_at": row["last_seen_at"],
        "last_heartbeat_at": row["last_heartbeat_at"],
        "current_tasks": row["current_tasks"],
        "stale": bool(row["stale"]),
    }
    if row["control"] is not None:  # only for a worker an operator asked to quiet or stop
        worker["control"] = row["control"]
        worker["control_at"] = row["control_at"]
    return worker


@openapi.worker_control_schema
class WorkerControlView(APIView):
    """``POST /workers/{worker_id}/quiet``, ``/stop`` and ``/resume``: 200 with the worker."""

    roles = {"POST": Role.ADMIN}

    def post(self, request: Request, worker_id: str, action: str) -> Response:
        controls.set_control(worker_id, controls.ACTIONS[action], actor=audit.api_actor(request))
        worker = registry.one_worker(worker_id)
        if worker is None:  # pruned between the two statements
            raise controls.WorkerNotFound(worker_id)
        return Response(_worker(worker))
