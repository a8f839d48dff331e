"""OpenAPI annotations of the queue, task, stats and DLQ endpoints.

One ``*_schema`` decorator per view (applied in ``queues.api.views``): what
each operation is called, what it takes and answers, and its errors. The
shapes they name are ``queues.api.openapi_components``; who may call each
operation is not written here but taken from the view's ``roles``
declaration when the document is built (``taskforge.http.openapi_hooks``).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view

from queues.api.inputs import (
    BulkReplaySerializer,
    EnqueueBatchSerializer,
    EnqueueSerializer,
    QueueCreateSerializer,
    QueueUpdateSerializer,
)
from queues.api.openapi_components import (
    BODY_ERRORS,
    DeadLetterPage,
    Purged,
    Queue,
    QueueHistory,
    QueueList,
    QueueStats,
    QueueWithSecret,
    Replayed,
    Task,
    TaskBatch,
    TaskPage,
    TaskWithHistory,
    errors,
)
from queues.models import Status

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
    _query("kind", OpenApiTypes.STR, "Only tasks of this kind."),
    _query(
        "payload_contains",
        OpenApiTypes.STR,
        'Only tasks whose payload contains this JSON object (Postgres `@>`), e.g. `{"user_id": "abc123"}`.',
    ),
    _query("created_after", OpenApiTypes.DATETIME, "Created strictly after (with an offset)."),
    _query("created_before", OpenApiTypes.DATETIME, "Created strictly before (with an offset)."),
    LIMIT,
    CURSOR,
]
DLQ_FILTERS = [
    _query("include_replayed", OpenApiTypes.BOOL, "Also entries whose task was replayed and is not dead now."),
    _query("kind", OpenApiTypes.STR, "Only entries whose task is of this kind."),
    _query("died_after", OpenApiTypes.DATETIME, "Died strictly after (with an offset)."),
    _query("died_before", OpenApiTypes.DATETIME, "Died strictly before (with an offset)."),
    LIMIT,
    CURSOR,
]


# --- per-view schemas ---------------------------------------------------------------------------

queue_list_schema = extend_schema_view(
    get=extend_schema(
        tags=["queues"],
        operation_id="list_queues",
        summary="List queues",
        description="Every queue, by name.",
        responses={200: QueueList, **errors()},
    ),
    post=extend_schema(
        tags=["queues"],
        operation_id="create_queue",
        summary="Create a queue",
        description="Unset settings take their defaults.",
        request=QueueCreateSerializer,
        responses={201: QueueWithSecret, **errors(*BODY_ERRORS, 409, conflict="The name is taken.")},
    ),
)

queue_detail_schema = extend_schema_view(
    get=extend_schema(
        tags=["queues"],
        operation_id="get_queue",
        summary="Read a queue",
        description="One queue's settings.",
        parameters=[QUEUE_NAME],
        responses={200: Queue, **errors(404)},
    ),
    patch=extend_schema(
        tags=["queues"],
        operation_id="update_queue",
        summary="Change a queue's settings, pause or resume it",
        description="The name cannot change.",
        parameters=[QUEUE_NAME],
        request=QueueUpdateSerializer,
        responses={200: QueueWithSecret, **errors(*BODY_ERRORS, 404)},
    ),
    delete=extend_schema(
        tags=["queues"],
        operation_id="delete_queue",
        summary="Delete a queue holding only finished history",
        description="Its done and cancelled tasks go with it.",
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
        description="No body is needed.",
        parameters=[QUEUE_NAME],
        request=None,
        responses={200: Purged, **errors(*BODY_ERRORS, 404)},
    ),
)

queue_push_secret_schema = extend_schema_view(
    post=extend_schema(
        tags=["queues"],
        operation_id="rotate_push_secret",
        summary="Rotate a push queue's signing secret",
        description=(
            "Answers the queue with its new `push_secret` (shown only here). The previous secret "
            "keeps signing, as a second `v1=` signature, for TASKFORGE_PUSH_SECRET_GRACE_SECONDS. "
            "No body is needed."
        ),
        parameters=[QUEUE_NAME],
        request=None,
        responses={
            200: QueueWithSecret,
            **errors(*BODY_ERRORS, 404, 409, conflict="The queue is a pull queue (its push is null)."),
        },
    ),
)

queue_stats_schema = extend_schema_view(
    get=extend_schema(
        tags=["queues"],
        operation_id="queue_stats",
        summary="Depth by status, DLQ depth, rates, error rate, oldest pending age",
        description="Rates are counts over the last 60 seconds divided by 60.",
        parameters=[QUEUE_NAME],
        responses={200: QueueStats, **errors(404)},
    ),
)

queue_history_schema = extend_schema_view(
    get=extend_schema(
        tags=["queues"],
        operation_id="queue_history",
        summary="Per-step history: enqueued, finished by outcome, enqueue-to-start and execution percentiles",
        description=(
            "From the per-minute samples of the queue's counters, kept `TASKFORGE_HISTORY_DAYS` days. "
            "One point per step from `since` (default: an hour ago; clamped to what is kept, at a whole minute) "
            "to now, at most 1440 points. A point whose figures are all `null` covers a time no sampler ran."
        ),
        parameters=[
            QUEUE_NAME,
            _query("since", OpenApiTypes.DATETIME, "Start (with an offset), in the past; default an hour ago."),
            _query("step", OpenApiTypes.INT, "Seconds per point: a whole number of minutes, 60-86400; default 60."),
        ],
        responses={200: QueueHistory, **errors(400, 404)},
    ),
)

task_list_schema = extend_schema_view(
    get=extend_schema(
        tags=["tasks"],
        operation_id="list_tasks",
        summary="List a queue's tasks, newest first",
        description="Keyset pagination: pass `next` back as `cursor`.",
        parameters=[QUEUE_NAME, *TASK_FILTERS],
        responses={200: TaskPage, **errors(400, 404)},
    ),
    post=extend_schema(
        tags=["tasks"],
        operation_id="enqueue_task",
        summary="Enqueue a task",
        description=(
            "201 with the new task; 200 with the existing one when `idempotency_key` was already used "
            "with the same body."
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
        description=(
            'One invalid item fails the batch with 400 and `fields` keyed by index ("3.priority"); '
            "an existing idempotency key puts the existing task in that item's slot."
        ),
        parameters=[QUEUE_NAME],
        request=EnqueueBatchSerializer,
        responses={
            201: TaskBatch,
            **errors(*BODY_ERRORS, 404, 409, conflict="An idempotency_key was used with a different body."),
        },
    ),
)

WAIT_SECONDS = _query(
    "wait_seconds",
    {"type": "integer", "minimum": 0, "maximum": 30},
    "Wait up to this many seconds (0-30, default 0) for the task to be `done`, `dead` or `cancelled`; "
    "the answer is the task as it is then (200 either way).",
)
_READ_DESCRIPTION = (
    "History is oldest first. With `wait_seconds`, the request answers as soon as the task is settled "
    "(`done`, `dead` or `cancelled`) or when the wait is over; a waiting request holds no database "
    "connection and no server thread."
)

task_detail_schema = extend_schema_view(
    get=extend_schema(
        tags=["tasks"],
        operation_id="get_task",
        summary="A task with its history of transitions; optionally wait for its result",
        description=_READ_DESCRIPTION,
        parameters=[QUEUE_NAME, TASK_ID, WAIT_SECONDS],
        responses={200: TaskWithHistory, **errors(400, 404)},
    ),
    delete=extend_schema(
        tags=["tasks"],
        operation_id="cancel_task",
        summary="Cancel a task: at once when waiting, on request when running",
        description=(
            "A `pending` or `retry` task is cancelled at once: 200 with the task, now `cancelled`. A `claimed` or "
            "`executing` task is asked to stop: 202 with the task, `cancel_requested` now true; its heartbeats say "
            "so, and its nack or lease expiry makes it `cancelled` (an ack still makes it `done`)."
        ),
        parameters=[QUEUE_NAME, TASK_ID],
        responses={
            200: Task,
            202: OpenApiResponse(Task, description="A running task was asked to stop."),
            **errors(404, 409, conflict="The task is done, dead or cancelled."),
        },
    ),
)

task_by_id_schema = extend_schema_view(
    get=extend_schema(
        tags=["tasks"],
        operation_id="get_task_by_id",
        summary="A task by id, whatever its queue; optionally wait for its result",
        description=_READ_DESCRIPTION,
        parameters=[TASK_ID, WAIT_SECONDS],
        responses={200: TaskWithHistory, **errors(400, 404)},
    ),
)

dlq_list_schema = extend_schema_view(
    get=extend_schema(
        tags=["dead-letter queue"],
        operation_id="list_dead_letters",
        summary="Dead tasks, newest death first",
        description="Entries whose task is dead now, unless `include_replayed=true`.",
        parameters=[QUEUE_NAME, *DLQ_FILTERS],
        responses={200: DeadLetterPage, **errors(400, 404)},
    ),
)

dlq_replay_schema = extend_schema_view(
    post=extend_schema(
        tags=["dead-letter queue"],
        operation_id="replay_dead_letter",
        summary="Put a dead task back to pending with a fresh attempt budget",
        description="No body is needed.",
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
        description='Either `{"ids": [...]}` (1-1000; ids not dead are skipped) or `{"all": true}`.',
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
        description="Removes the DLQ entry and the task.",
        parameters=[QUEUE_NAME, TASK_ID],
        responses={
            204: OpenApiResponse(description="Discarded."),
            **errors(404, 409, conflict="The task is not dead."),
        },
    ),
)
