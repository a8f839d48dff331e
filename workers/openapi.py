"""OpenAPI description of the worker protocol: its result shapes and per-view annotations.

Schema only, as ``queues.api.openapi``: request bodies are ``workers.inputs``'
serializers, shared shapes come from ``queues.api.openapi_components``, and who
may call each operation comes from the view's ``roles`` declaration.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers

from queues.api.openapi_components import BODY_ERRORS, ERROR_CODES, ClaimedTask, Task, errors
from queues.models import Status
from workers.inputs import (
    AckBatchSerializer,
    AckSerializer,
    ClaimSerializer,
    HeartbeatSerializer,
    NackBatchSerializer,
    NackSerializer,
)

_CONTROL_HELP = (
    "What an operator asked this worker, present only then: `quiet` (claim nothing, finish what it holds) "
    "or `stop` (finish what it holds, then exit). Claims are answered with no tasks while it is set."
)


class ClaimResult(serializers.Serializer):
    tasks = ClaimedTask(many=True, help_text="Possibly empty.")
    control = serializers.ChoiceField(choices=["quiet", "stop"], required=False, help_text=_CONTROL_HELP)


class HeartbeatResult(serializers.Serializer):
    task_id = serializers.UUIDField()
    status = serializers.CharField(help_text="`executing`.")
    lease_expires_at = serializers.DateTimeField()
    cancel_requested = serializers.BooleanField(
        help_text="True once a producer asked to cancel the task: stop the work and nack it (it becomes cancelled)."
    )
    control = serializers.ChoiceField(choices=["quiet", "stop"], required=False, help_text=_CONTROL_HELP)


class ItemError(serializers.Serializer):
    code = serializers.ChoiceField(choices=ERROR_CODES, help_text="`not_found` or `lease_lost`.")
    message = serializers.CharField()


class BatchItemResult(serializers.Serializer):
    task_id = serializers.UUIDField()
    status = serializers.ChoiceField(
        choices=Status.choices, required=False, help_text="The task's status after the move (when it succeeded)."
    )
    error = ItemError(required=False, help_text="Why this item failed (the other items are unaffected).")


class BatchResult(serializers.Serializer):
    results = BatchItemResult(many=True, help_text="One per item, in order.")


class Worker(serializers.Serializer):
    worker_id = serializers.CharField()
    last_seen_at = serializers.DateTimeField()
    last_heartbeat_at = serializers.DateTimeField(allow_null=True)
    current_tasks = serializers.ListField(child=serializers.UUIDField(), help_text="Ids of the tasks it holds.")
    stale = serializers.BooleanField(
        help_text="Holds tasks, and its last heartbeat (its claim if it never sent one) is older than the "
        "heartbeat timeout; claims do not count as heartbeats."
    )
    control = serializers.ChoiceField(choices=["quiet", "stop"], required=False, help_text=_CONTROL_HELP)
    control_at = serializers.DateTimeField(required=False, help_text="When the control was set (with `control`).")


class WorkerList(serializers.Serializer):
    results = Worker(many=True)


_LEASE_LOST = (
    "`lease_lost`: the caller does not hold the task's current lease (expired, reclaimed, claimed by another)."
)

claim_schema = extend_schema_view(
    post=extend_schema(
        tags=["workers"],
        operation_id="claim_tasks",
        summary="Claim up to max_tasks due tasks, long-polling up to wait_seconds",
        description=(
            "Without `queue`, any unpaused queue: lowest priority number first, then oldest `scheduled_at`. "
            "Each claimed task is `claimed`, its attempts go up by one, and it carries its lease."
        ),
        request=ClaimSerializer,
        responses={
            200: ClaimResult,
            **errors(*BODY_ERRORS, 404, 409, conflict="The queue named is a push queue: TaskForge delivers its tasks."),
        },
    ),
)

heartbeat_schema = extend_schema_view(
    post=extend_schema(
        tags=["workers"],
        operation_id="heartbeat",
        summary="Extend a lease; the first heartbeat moves the task to executing",
        description="The lease then lasts TASKFORGE_HEARTBEAT_TIMEOUT seconds from now.",
        request=HeartbeatSerializer,
        responses={200: HeartbeatResult, **errors(*BODY_ERRORS, 404, 409, conflict=_LEASE_LOST)},
    ),
)

ack_schema = extend_schema_view(
    post=extend_schema(
        tags=["workers"],
        operation_id="ack_task",
        summary="Report success: the task becomes done",
        description="Repeating a successful ack with the same lease answers 200 again.",
        request=AckSerializer,
        responses={200: Task, **errors(*BODY_ERRORS, 404, 409, conflict=_LEASE_LOST)},
    ),
)

nack_schema = extend_schema_view(
    post=extend_schema(
        tags=["workers"],
        operation_id="nack_task",
        summary="Report failure: retry with backoff, or dead",
        description=(
            "`retry` with the backoff (or `retry_after_seconds`), or `dead` once 1 + max_retries attempts "
            "were used or when `retry` is false."
        ),
        request=NackSerializer,
        responses={200: Task, **errors(*BODY_ERRORS, 404, 409, conflict=_LEASE_LOST)},
    ),
)

ack_batch_schema = extend_schema_view(
    post=extend_schema(
        tags=["workers"],
        operation_id="ack_tasks",
        summary="Ack 1-100 tasks; each item is judged alone",
        description="Items that fail carry an error (`not_found`, `lease_lost`) in their result.",
        request=AckBatchSerializer,
        responses={200: BatchResult, **errors(*BODY_ERRORS)},
    ),
)

nack_batch_schema = extend_schema_view(
    post=extend_schema(
        tags=["workers"],
        operation_id="nack_tasks",
        summary="Nack 1-100 tasks; each item is judged alone",
        description="Items that fail carry an error (`not_found`, `lease_lost`) in their result.",
        request=NackBatchSerializer,
        responses={200: BatchResult, **errors(*BODY_ERRORS)},
    ),
)

worker_control_schema = extend_schema_view(
    post=extend_schema(
        tags=["workers"],
        operation_id="control_worker",
        summary="Ask a worker to quiet or stop, or take that back (resume)",
        description=(
            "`quiet`: its claims are answered with no tasks (and `control`) from now on; it finishes what it holds. "
            "`stop`: the same, and the reference worker exits 0 once it holds nothing. `resume`: back to work. "
            "The control stays with the worker id until resumed (or the worker is pruned)."
        ),
        parameters=[
            OpenApiParameter("worker_id", OpenApiTypes.STR, OpenApiParameter.PATH, description="As it claims."),
            OpenApiParameter("action", OpenApiTypes.STR, OpenApiParameter.PATH, enum=["quiet", "stop", "resume"]),
        ],
        request=None,
        responses={200: Worker, **errors(404)},
    ),
)

worker_list_schema = extend_schema_view(
    get=extend_schema(
        tags=["workers"],
        operation_id="list_workers",
        summary="Workers seen in the last 10 minutes",
        description="Seen: any claim, heartbeat, ack or nack.",
        responses={200: WorkerList, **errors()},
    ),
)
