"""The worker protocol: claim, heartbeat, ack, nack (single and batch), listing."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from rest_framework import serializers as drf_serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from queues import dispatch, lifecycle
from queues.api import outputs
from queues.api.lookups import queue_or_404
from queues.telemetry.observe import queue_name
from taskforge.http.errors import error_body
from workers import longpoll, openapi, registry
from workers.inputs import (
    AckBatchSerializer,
    AckSerializer,
    ClaimSerializer,
    HeartbeatSerializer,
    NackBatchSerializer,
    NackSerializer,
)
from workers.longpoll import LongPollView, finish_later

WORKER, ADMIN = "worker", "admin"


def _validated(serializer_class: type[drf_serializers.Serializer], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _task(row: dict[str, Any]) -> dict[str, Any]:
    return outputs.task(row, queue_name(row["queue_id"]))


def _batch_result(task_id: Any, outcome: Any) -> dict[str, Any]:
    if isinstance(outcome, Exception):
        return {"task_id": task_id, **error_body(outcome.code, outcome.message)}  # type: ignore[attr-defined]
    return {"task_id": task_id, "status": outcome["status"]}


def _claimed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tasks": [outputs.task(row, queue_name(row["queue_id"]), with_lease=True) for row in rows]}


@openapi.claim_schema
class ClaimView(LongPollView):
    """A long poll waits on the event loop (see workers.longpoll), holding no database connection."""

    roles = {"POST": WORKER}
    threaded_attempt = False

    def post(self, request: Request) -> Response:
        fields = _validated(ClaimSerializer, request.data)
        queue = queue_or_404(fields["queue"]) if fields["queue"] is not None else None
        worker_id, max_tasks, wait_seconds = fields["worker_id"], fields["max_tasks"], fields["wait_seconds"]
        registry.seen(worker_id, claim=True)
        if not wait_seconds:
            return Response(_claimed(dispatch.claim(worker_id, queue, max_tasks).rows))
        if self.threaded_attempt:  # one of workers.longpoll.LongPoll's attempts: never waits itself
            claimed = dispatch.claim(worker_id, queue, max_tasks)
            if claimed.rows or longpoll.attempt(request) == "last":
                return Response(_claimed(claimed.rows))
            return longpoll.must_wait(longpoll.WaitFor(fields["queue"], max_tasks, wait_seconds, claimed.retry_after))

        async def wait() -> dict[str, Any]:  # claims at once, then waits if it found nothing
            rows = await dispatch.claim_waiting(worker_id, queue, max_tasks, wait_seconds)
            return await sync_to_async(_claimed)(rows)

        return finish_later(Response({"tasks": []}), wait)


@openapi.heartbeat_schema
class HeartbeatView(APIView):
    roles = {"POST": WORKER}

    def post(self, request: Request) -> Response:
        fields = _validated(HeartbeatSerializer, request.data)
        registry.seen(fields["worker_id"], heartbeat=True)
        row = lifecycle.heartbeat(fields["task_id"], worker_id=fields["worker_id"], lease_token=fields["lease_token"])
        return Response({"task_id": row["id"], "status": row["status"], "lease_expires_at": row["lease_expires_at"]})


@openapi.ack_schema
class AckView(APIView):
    roles = {"POST": WORKER}

    def post(self, request: Request) -> Response:
        fields = _validated(AckSerializer, request.data)
        registry.seen(fields["worker_id"])
        row = lifecycle.ack(
            fields["task_id"],
            worker_id=fields["worker_id"],
            lease_token=fields["lease_token"],
            result=fields["result"],
        )
        return Response(_task(row))


@openapi.nack_schema
class NackView(APIView):
    roles = {"POST": WORKER}

    def post(self, request: Request) -> Response:
        fields = _validated(NackSerializer, request.data)
        registry.seen(fields["worker_id"])
        row = lifecycle.nack(
            fields["task_id"],
            worker_id=fields["worker_id"],
            error=fields["error"],
            lease_token=fields["lease_token"],
            retry=fields["retry"],
            retry_after_seconds=fields["retry_after_seconds"],
        )
        return Response(_task(row))


@openapi.ack_batch_schema
class AckBatchView(APIView):
    roles = {"POST": WORKER}

    def post(self, request: Request) -> Response:
        fields = _validated(AckBatchSerializer, request.data)
        registry.seen(fields["worker_id"])
        items = [lifecycle.AckItem(i["task_id"], i["lease_token"], i["result"]) for i in fields["items"]]
        outcomes = lifecycle.ack_many(fields["worker_id"], items)
        return Response(
            {"results": [_batch_result(item.task_id, outcome) for item, outcome in zip(items, outcomes, strict=True)]}
        )


@openapi.nack_batch_schema
class NackBatchView(APIView):
    roles = {"POST": WORKER}

    def post(self, request: Request) -> Response:
        fields = _validated(NackBatchSerializer, request.data)
        registry.seen(fields["worker_id"])
        items = [
            lifecycle.NackItem(i["task_id"], i["error"], i["lease_token"], i["retry"], i["retry_after_seconds"])
            for i in fields["items"]
        ]
        outcomes = lifecycle.nack_many(fields["worker_id"], items)
        return Response(
            {"results": [_batch_result(item.task_id, outcome) for item, outcome in zip(items, outcomes, strict=True)]}
        )


@openapi.worker_list_schema
class WorkerListView(APIView):
    roles = {"GET": ADMIN}

    def get(self, request: Request) -> Response:
        return Response(
            {
                "results": [
                    {
                        "worker_id": w["worker_id"],
                        "last_seen_at": w["last_seen_at"],
                        "last_heartbeat_at": w["last_heartbeat_at"],
                        "current_tasks": w["current_tasks"],
                        "stale": bool(w["stale"]),
                    }
                    for w in registry.active_workers()
                ]
            }
        )
