"""OpenAPI components: the shapes the endpoints' annotations refer to.

Schema only. The views build their bodies as plain dicts
(``queues.api.outputs``); the serializers here just tell drf-spectacular what
those bodies look like (``tests/integration/observability/test_openapi.py``
holds them to the same fields). Request bodies are the input serializers of
``queues.api.inputs`` and ``workers.inputs`` themselves, with extensions
where a field cannot say what it accepts. Shared by ``queues.api.openapi``
and ``workers.openapi``: the error shape, the bearer scheme, the queue, task
and DLQ objects.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers

from queues.api.inputs import EnqueueSerializer
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
    match_subclasses = True  # heartbeats' progress (workers.inputs.ProgressField) is one too

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


# --- request bodies: the input serializers, where a field cannot say what it takes ------------


class AnyJSONFieldSchema(OpenApiSerializerFieldExtension):
    """Any JSON value: the field takes what the parser accepted."""

    target_class = "queues.api.inputs.AnyJSONField"

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        return {}


def _push_schema(*, request: bool) -> dict[str, Any]:
    """A queue's ``push``, inline and nullable (OpenAPI 3.0 cannot make a referenced object nullable)."""
    return {
        "type": "object",
        "nullable": True,
        "description": "null: workers pull; an object: TaskForge delivers each task over HTTP "
        "(a PATCH replaces it whole).",
        "properties": {
            "url": {"type": "string", "minLength": 1, "maxLength": 2048,
                    "description": "http or https; each attempt is one POST here."},
            "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": 1800, "default": 30,
                                "description": "Deadline of one delivery, in seconds."},
            "max_concurrent": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10,
                               "description": "Deliveries in flight for the queue across every pusher."},
            "headers": {
                "type": "object",
                "maxProperties": 20,
                "additionalProperties": {"type": "string", "maxLength": 1024},
                "description": "Up to 20 extra request headers (names of letters, digits and '-'); not Host, "
                "Content-Length, Content-Type, Transfer-Encoding, Connection or any TaskForge- name.",
            },
        },
        "required": ["url"] if request else ["url", "timeout_seconds", "max_concurrent", "headers"],
        **({"additionalProperties": False} if request else {}),
    }  # fmt: skip


class PushSerializerSchema(OpenApiSerializerFieldExtension):
    """``push`` in queue create and PATCH bodies."""

    target_class = "queues.api.inputs.PushSerializer"

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        return _push_schema(request=True)


@extend_schema_field(_push_schema(request=False))
class PushField(serializers.JSONField):
    """``push`` in the queue object."""


class EnqueueBatchSchema(OpenApiSerializerExtension):
    """The batch body is ``EnqueueBatchSerializer``'s, but each item is an enqueue body.

    The serializer takes the items as any JSON and checks each one itself, as
    ``EnqueueSerializer`` would (to word the errors by index), so its field
    alone cannot say what an item must be.
    """

    target_class = "queues.api.inputs.EnqueueBatchSerializer"

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        item = auto_schema.resolve_serializer(EnqueueSerializer, direction)
        schema["properties"]["tasks"]["items"] = item.ref
        return schema


# --- the error shape ------------------------------------------------------------------


class ErrorDetail(serializers.Serializer):
    code = serializers.ChoiceField(choices=ERROR_CODES)
    message = serializers.CharField()
    # The contract names this member "fields"; DRF's metaclass moves declared fields out of the
    # class body, so it never shadows Serializer.fields at run time.
    fields = serializers.DictField(  # type: ignore[assignment]
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
    rate_burst = serializers.IntegerField(
        allow_null=True, help_text="Token bucket size in force (rate_limit unless set); null only when unlimited."
    )
    paused = serializers.BooleanField()
    retry_base_ms = serializers.IntegerField()
    retry_max_delay_ms = serializers.IntegerField()
    timeout_seconds = serializers.IntegerField(
        allow_null=True, help_text="Execution time limit of one attempt (1-86400 s); null: none."
    )
    push = PushField()
    created_at = _timestamp()
    updated_at = _timestamp()


class QueueWithSecret(Queue):
    push_secret = serializers.CharField(
        required=False,
        help_text="The push queue's new signing secret: only in the answer that made it (set push, rotate).",
    )


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


def _count(text: str) -> serializers.IntegerField:
    return serializers.IntegerField(allow_null=True, help_text=text)


def _ms(text: str) -> serializers.FloatField:
    return serializers.FloatField(allow_null=True, help_text=f"{text}, in ms (null: nothing observed).")


class HistoryPoint(serializers.Serializer):
    at = _timestamp()
    enqueued = _count("Tasks enqueued in the step.")
    completed = _count("Attempts acked (done).")
    failed = _count("Attempts nacked with retries left.")
    dead = _count("Attempts that sent their task to the dead-letter queue.")
    expired = _count("Attempts whose lease expired.")
    wait_p50_ms = _ms("Median enqueue-to-start (scheduled_at to claim)")
    wait_p95_ms = _ms("95th percentile of enqueue-to-start")
    run_p50_ms = _ms("Median execution time (claim to outcome)")
    run_p95_ms = _ms("95th percentile of execution time")


class QueueHistory(serializers.Serializer):
    queue = serializers.CharField()
    since = _timestamp()
    step = serializers.IntegerField(help_text="Seconds per point.")
    points = HistoryPoint(many=True, help_text="Oldest first; all figures null where no sampler ran.")


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
    kind = serializers.CharField(allow_null=True, help_text="What the task is, as the producer named it.")
    timeout_seconds = serializers.IntegerField(
        allow_null=True, help_text="Execution time limit of each attempt, counted from its claim; null: none."
    )
    cancel_requested = serializers.BooleanField(
        help_text="A cancel of this running task was requested; its nack or lease expiry makes it cancelled."
    )
    progress = NullableObjectField(help_text="The latest progress object a heartbeat sent; null before any.")


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
