"""OpenAPI description of the queue, task, stats and DLQ endpoints.

Schema only: the views build their bodies as plain dicts
(``queues.api.outputs``) and validate input with ``queues.api.inputs``;
the serializers here just tell drf-spectacular what those bodies look like,
and the ``*_schema`` decorators attach them to the views. Shared pieces (the
error shape, the bearer scheme, the task object) are used by
``workers.openapi`` too.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerFieldExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import serializers

from queues.api.inputs import BulkReplaySerializer, EnqueueSerializer, QueueCreateSerializer, QueueUpdateSerializer
from queues.models import Status

ERROR_CODES = (
    "validation_error",
    "unauthorized",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "conflict",
    "lease_lost",
    "payload_too_large",
    "unsupported_media_type",
    "unavailable",
    "internal_error",
)


class BearerApiKeyScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer <api key>`` for every endpoint that takes a key."""

    target_class = "queues.apikeys.ApiKeyAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key from `manage.py create_api_key NAME --role admin|producer|worker`. "
            "No or unknown key: 401; a key without the endpoint's role: 403.",
        }


# --- fields drf-spectacular cannot guess ------------------------------------------------


class JSONObjectFieldSchema(OpenApiSerializerFieldExtension):
    """The strict input field for payloads and results: a JSON object, nothing else."""

    target_class = "taskforge.http.fields.JSONObjectField"

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": True}


class AwareDateTimeFieldSchema(OpenApiSerializerFieldExtension):
    """Timestamps in input: ISO 8601 with an explicit offset (a naive one is a 400)."""

    target_class = "taskforge.http.fields.AwareDateTimeField"

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        return {"type": "string", "format": "date-time"}


@extend_schema_field({"type": "object", "additionalProperties": True})
class ObjectField(serializers.JSONField):
    """Any JSON object (a payload, a result)."""


@extend_schema_field({"type": "object", "additionalProperties": True, "nullable": True})
class NullableObjectField(serializers.JSONField):
    pass


def _timestamp(**kwargs: Any) -> serializers.DateTimeField:
    return serializers.DateTimeField(**kwargs)


# --- the error shape ------------------------------------------------------------------


class ErrorDetail(serializers.Serializer):
    code = serializers.ChoiceField(choices=ERROR_CODES)
    message = serializers.CharField()
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text='Only for validation errors: messages by field ("priority", or "3.priority" in a batch).',
    )


class Error(serializers.Serializer):
    error = ErrorDetail()


_ERROR_MEANINGS = {
    400: "Invalid input (bad JSON, unknown or read-only field, wrong type, out of range): nothing was stored.",
    401: "No API key, or an unknown or revoked one.",
    403: "The API key's role does not allow this endpoint.",
    404: "No such queue or task (also for a malformed id in the path).",
    409: "Conflict with the current state.",
    413: "The request body exceeds TASKFORGE_MAX_PAYLOAD_BYTES.",
    415: "The body is not UTF-8 application/json, or is compressed.",
    503: "Postgres is unavailable right now (restart, cut connection, timeout): retry after Retry-After seconds.",
}


def errors(*statuses: int, conflict: str | None = None) -> dict[int, OpenApiResponse]:
    """Error responses, all in the one error shape; 401, 403 and 503 are always possible."""
    wanted = sorted({401, 403, 503, *statuses})
    out = {}
    for status in wanted:
        text = _ERROR_MEANINGS[status]
        if status == 409 and conflict:
            text = conflict
        out[status] = OpenApiResponse(Error, description=text)
    return out


BODY_ERRORS = (400, 413, 415)

# --- queues ------------------------------------------------------------------------------


class Queue(serializers.Serializer):
    name = serializers.CharField()
    max_retries = serializers.IntegerField(min_value=0, max_value=25)
    rate_limit = serializers.IntegerField(allow_null=True, help_text="Tasks dispatched per second; null: unlimited.")
    rate_burst = serializers.IntegerField(allow_null=True, help_text="Token bucket size; null: equal to rate_limit.")
    paused = serializers.BooleanField()
    retry_base_ms = serializers.IntegerField()
    retry_max_delay_ms = serializers.IntegerField()
    created_at = _timestamp()
    updated_at = _timestamp()


class QueueList(serializers.Serializer):
    results = Queue(many=True)


class Purged(serializers.Serializer):
    purged = serializers.IntegerField(help_text="How many pending and retry tasks were cancelled.")


class DepthByStatus(serializers.Serializer):
    pending = serializers.IntegerField(help_text="Due pending tasks.")
    scheduled = serializers.IntegerField(help_text="Pending tasks not yet due.")
    claimed = serializers.IntegerField()
    executing = serializers.IntegerField()
    retry = serializers.IntegerField()
    done = serializers.IntegerField()
    dead = serializers.IntegerField()
    cancelled = serializers.IntegerField()


class QueueStats(serializers.Serializer):
    queue = serializers.CharField()
    depth = DepthByStatus()
    dlq_depth = serializers.IntegerField()
    enqueued_per_sec = serializers.FloatField(help_text="Enqueued in the last 60 s, divided by 60.")
    completed_per_sec = serializers.FloatField(help_text="Acked in the last 60 s, divided by 60.")
    error_rate = serializers.FloatField(help_text="Failed attempts over finished attempts in the last 60 s.")
    oldest_pending_age_seconds = serializers.FloatField(allow_null=True)
    paused = serializers.BooleanField()


# --- tasks -------------------------------------------------------------------------------


class Task(serializers.Serializer):
    id = serializers.UUIDField()
    queue = serializers.CharField()
    payload = ObjectField()
    status = serializers.ChoiceField(choices=Status.choices)
    priority = serializers.IntegerField(min_value=1, max_value=10)
    scheduled_at = _timestamp()
    created_at = _timestamp()
    updated_at = _timestamp()
    claimed_at = _timestamp(allow_null=True)
    claimed_by = serializers.CharField(allow_null=True)
    heartbeat_at = _timestamp(allow_null=True)
    attempts = serializers.IntegerField()
    max_retries = serializers.IntegerField()
    last_error = serializers.CharField(allow_null=True)
    result = NullableObjectField()
    finished_at = _timestamp(allow_null=True)
    idempotency_key = serializers.CharField(allow_null=True)


class ClaimedTask(Task):
    lease_token = serializers.CharField(help_text="Send it back with heartbeat, ack and nack.")
    lease_expires_at = _timestamp()


class HistoryEntry(serializers.Serializer):
    at = _timestamp()
    from_status = serializers.ChoiceField(choices=Status.choices, allow_null=True, help_text="null for the enqueue.")
    to_status = serializers.ChoiceField(choices=Status.choices)
    worker_id = serializers.CharField(allow_null=True)
    detail = serializers.CharField(allow_null=True, help_text="The error text of a failure, or who replayed.")


class TaskWithHistory(Task):
    history = HistoryEntry(many=True)


class TaskPage(serializers.Serializer):
    results = Task(many=True)
    next = serializers.CharField(allow_null=True, help_text="Opaque cursor of the next page; null on the last.")


class TaskBatch(serializers.Serializer):
    tasks = Task(many=True)


class EnqueueBatch(serializers.Serializer):
    tasks = EnqueueSerializer(many=True, min_length=1, max_length=1000)


# --- dead-letter queue -------------------------------------------------------------------


class DeadLetter(serializers.Serializer):
    id = serializers.UUIDField(help_text="The task's id.")
    queue = serializers.CharField()
    payload = ObjectField()
    last_error = serializers.CharField(allow_null=True)
    attempts = serializers.IntegerField()
    died_at = _timestamp()
    replayed_at = _timestamp(allow_null=True)
    replay_count = serializers.IntegerField()


class DeadLetterPage(serializers.Serializer):
    results = DeadLetter(many=True)
    next = serializers.CharField(allow_null=True)


class Replayed(serializers.Serializer):
    replayed = serializers.IntegerField(help_text="How many dead tasks went back to pending.")


# --- parameters ------------------------------------------------------------------------------

# No pattern on the name: any name that is not a queue's is simply a 404.
QUEUE_NAME = OpenApiParameter(
    "name", OpenApiTypes.STR, OpenApiParameter.PATH, description="The queue's name (1-64 letters, digits, - or _)."
)
TASK_ID = OpenApiParameter(
    "task_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The task's id (a malformed one is a 404)."
)


def _query(name: str, kind: Any, description: str, **kwargs: Any) -> OpenApiParameter:
    return OpenApiParameter(name, kind, OpenApiParameter.QUERY, required=False, description=description, **kwargs)


LIMIT = _query("limit", {"type": "integer", "minimum": 1, "maximum": 500}, "Page size, 1-500 (default 50).")
CURSOR = _query("cursor", OpenApiTypes.STR, "The `next` value of the previous page.")
TASK_FILTERS = [
    _query("status", OpenApiTypes.STR, "Only tasks in this status.", enum=list(Status.values)),
    _query("claimed_by", OpenApiTypes.STR, "Only tasks claimed by this worker."),
    _query("created_after", OpenApiTypes.DATETIME, "Created strictly after (with an offset)."),
    _query("created_before", OpenApiTypes.DATETIME, "Created strictly before (with an offset)."),
    LIMIT,
    CURSOR,
]
DLQ_FILTERS = [
    _query("include_replayed", OpenApiTypes.BOOL, "Also entries whose task was replayed and is not dead now."),
    _query("died_after", OpenApiTypes.DATETIME, "Died strictly after (with an offset)."),
    _query("died_before", OpenApiTypes.DATETIME, "Died strictly before (with an offset)."),
    LIMIT,
    CURSOR,
]


def role(name: str, text: str) -> str:
    return f"{text}\n\nRole: `{name}` (or `admin`)." if name != "admin" else f"{text}\n\nRole: `admin`."


# --- per-view schemas (applied as class decorators in queues.api.views) ---------------------------

queue_list_schema = extend_schema_view(
    get=extend_schema(
        tags=["queues"],
        operation_id="list_queues",
        summary="List queues",
        description=role("producer", "Every queue, by name."),
        responses={200: QueueList, **errors()},
    ),
    post=extend_schema(
        tags=["queues"],
        operation_id="create_queue",
        summary="Create a queue",
        description=role("admin", "Unset settings take their defaults."),
        request=QueueCreateSerializer,
        responses={201: Queue, **errors(*BODY_ERRORS, 409, conflict="The name is taken.")},
    ),
)

queue_detail_schema = extend_schema_view(
    get=extend_schema(
        tags=["queues"],
        operation_id="get_queue",
        summary="Read a queue",
        description=role("producer", "One queue's settings."),
        parameters=[QUEUE_NAME],
        responses={200: Queue, **errors(404)},
    ),
    patch=extend_schema(
        tags=["queues"],
        operation_id="update_queue",
        summary="Change a queue's settings, pause or resume it",
        description=role("admin", "The name cannot change."),
        parameters=[QUEUE_NAME],
        request=QueueUpdateSerializer,
        responses={200: Queue, **errors(*BODY_ERRORS, 404)},
    ),
    delete=extend_schema(
        tags=["queues"],
        operation_id="delete_queue",
        summary="Delete a queue holding only finished history",
        description=role("admin", "Its done and cancelled tasks go with it."),
        parameters=[QUEUE_NAME],
        responses={
            204: OpenApiResponse(description="Deleted."),
            **errors(404, 409, conflict="Tasks in pending, claimed, executing, retry or dead block it (counted)."),
        },
    ),
)

queue_purge_schema = extend_schema_view(
    post=extend_schema(
        tags=["queues"],
        operation_id="purge_queue",
        summary="Cancel every pending and retry task",
        description=role("admin", "No body is needed."),
        parameters=[QUEUE_NAME],
        request=None,
        responses={200: Purged, **errors(*BODY_ERRORS, 404)},
    ),
)

queue_stats_schema = extend_schema_view(
    get=extend_schema(
        tags=["queues"],
        operation_id="queue_stats",
        summary="Depth by status, DLQ depth, rates, error rate, oldest pending age",
        description=role("producer", "Rates are counts over the last 60 seconds divided by 60."),
        parameters=[QUEUE_NAME],
        responses={200: QueueStats, **errors(404)},
    ),
)

task_list_schema = extend_schema_view(
    get=extend_schema(
        tags=["tasks"],
        operation_id="list_tasks",
        summary="List a queue's tasks, newest first",
        description=role("producer", "Keyset pagination: pass `next` back as `cursor`."),
        parameters=[QUEUE_NAME, *TASK_FILTERS],
        responses={200: TaskPage, **errors(400, 404)},
    ),
    post=extend_schema(
        tags=["tasks"],
        operation_id="enqueue_task",
        summary="Enqueue a task",
        description=role(
            "producer",
            "201 with the new task; 200 with the existing one when `idempotency_key` was already used "
            "with the same body.",
        ),
        parameters=[QUEUE_NAME],
        request=EnqueueSerializer,
        responses={
            201: OpenApiResponse(Task, description="Created."),
            200: OpenApiResponse(Task, description="Idempotent replay: the existing task, nothing created."),
            **errors(*BODY_ERRORS, 404, 409, conflict="The idempotency_key was used with a different body."),
        },
        examples=[
            OpenApiExample(
                "Welcome e-mail",
                value={
                    "payload": {"user_id": "abc123", "action": "send_welcome_email"},
                    "priority": 3,
                    "idempotency_key": "welcome-abc123",
                },
                request_only=True,
            )
        ],
    ),
)

task_batch_schema = extend_schema_view(
    post=extend_schema(
        tags=["tasks"],
        operation_id="enqueue_tasks",
        summary="Enqueue 1-1000 tasks, all or nothing",
        description=role(
            "producer",
            'One invalid item fails the batch with 400 and `fields` keyed by index ("3.priority"); '
            "an existing idempotency key puts the existing task in that item's slot.",
        ),
        parameters=[QUEUE_NAME],
        request=EnqueueBatch,
        responses={
            201: TaskBatch,
            **errors(*BODY_ERRORS, 404, 409, conflict="An idempotency_key was used with a different body."),
        },
    ),
)

task_detail_schema = extend_schema_view(
    get=extend_schema(
        tags=["tasks"],
        operation_id="get_task",
        summary="A task with its history of transitions",
        description=role("producer", "History is oldest first."),
        parameters=[QUEUE_NAME, TASK_ID],
        responses={200: TaskWithHistory, **errors(404)},
    ),
    delete=extend_schema(
        tags=["tasks"],
        operation_id="cancel_task",
        summary="Cancel a pending or retry task",
        description=role("producer", "Answers the task, now `cancelled`."),
        parameters=[QUEUE_NAME, TASK_ID],
        responses={200: Task, **errors(404, 409, conflict="The task is not pending or retry.")},
    ),
)

dlq_list_schema = extend_schema_view(
    get=extend_schema(
        tags=["dead-letter queue"],
        operation_id="list_dead_letters",
        summary="Dead tasks, newest death first",
        description=role("admin", "Entries whose task is dead now, unless `include_replayed=true`."),
        parameters=[QUEUE_NAME, *DLQ_FILTERS],
        responses={200: DeadLetterPage, **errors(400, 404)},
    ),
)

dlq_replay_schema = extend_schema_view(
    post=extend_schema(
        tags=["dead-letter queue"],
        operation_id="replay_dead_letter",
        summary="Put a dead task back to pending with a fresh attempt budget",
        description=role("admin", "No body is needed."),
        parameters=[QUEUE_NAME, TASK_ID],
        request=None,
        responses={200: Task, **errors(*BODY_ERRORS, 404, 409, conflict="The task is not dead.")},
    ),
)

dlq_bulk_replay_schema = extend_schema_view(
    post=extend_schema(
        tags=["dead-letter queue"],
        operation_id="replay_dead_letters",
        summary="Replay several dead tasks, or all of the queue's",
        description=role("admin", 'Either `{"ids": [...]}` (1-1000; ids not dead are skipped) or `{"all": true}`.'),
        parameters=[QUEUE_NAME],
        request=BulkReplaySerializer,
        responses={200: Replayed, **errors(*BODY_ERRORS, 404)},
    ),
)

dlq_detail_schema = extend_schema_view(
    delete=extend_schema(
        tags=["dead-letter queue"],
        operation_id="discard_dead_letter",
        summary="Discard a dead task for good",
        description=role("admin", "Removes the DLQ entry and the task."),
        parameters=[QUEUE_NAME, TASK_ID],
        responses={
            204: OpenApiResponse(description="Discarded."),
            **errors(404, 409, conflict="The task is not dead."),
        },
    ),
)
