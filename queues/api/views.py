"""Queue, task, stats and DLQ endpoints: validate, call the lifecycle, render."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.http import HttpResponse, QueryDict
from rest_framework import serializers as drf_serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from queues import lifecycle
from queues.api import openapi, outputs, pages
from queues.api.inputs import (
    BulkReplaySerializer,
    EnqueueBatchSerializer,
    PushSecretSerializer,
    QueueCreateSerializer,
    QueueUpdateSerializer,
    validate_enqueue,
)
from queues.api.lookups import queue_or_404, task_id_or_404
from queues.api.queue_update import apply_push, check_delay_bounds, update_queue
from queues.api.results import read_task_once
from queues.apikeys import Role
from queues.dispatch import announce
from queues.errors import QueueNameTaken
from queues.models import DeadLetterTask, Queue, Status
from queues.push import secrets as push_secrets
from queues.telemetry import history
from queues.telemetry.stats import queue_stats
from taskforge.http.pagination import QueryParams, encode_cursor
from taskforge.infra.clock import database_now
from taskforge.ops import audit
from workers import longpoll

TASK_LIST_PARAMS = frozenset(
    {"status", "claimed_by", "kind", "payload_contains", "created_after", "created_before", "limit", "cursor"}
)
DLQ_LIST_PARAMS = frozenset({"include_replayed", "kind", "died_after", "died_before", "limit", "cursor"})


def _validated(serializer_class: type[drf_serializers.Serializer], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


# --- queues -----------------------------------------------------------------------


@openapi.queue_list_schema
class QueueListView(APIView):
    roles = {"GET": Role.PRODUCER, "POST": Role.ADMIN}

    def get(self, request: Request) -> Response:
        return Response({"results": [outputs.queue(q) for q in Queue.objects.all()]})

    def post(self, request: Request) -> Response:
        fields = _validated(QueueCreateSerializer, request.data)
        push = fields.pop("push", None)
        queue = Queue(**fields)
        new_secret = apply_push(queue, push)
        check_delay_bounds(queue.retry_base_ms, queue.retry_max_delay_ms)
        try:
            with transaction.atomic():
                queue.save()
        except IntegrityError:
            raise QueueNameTaken(fields["name"]) from None
        return Response(outputs.queue(queue, push_secret=new_secret), status=201)


@openapi.queue_detail_schema
class QueueDetailView(APIView):
    roles = {"GET": Role.PRODUCER, "PATCH": Role.ADMIN, "DELETE": Role.ADMIN}

    def get(self, request: Request, name: str) -> Response:
        return Response(outputs.queue(queue_or_404(name)))

    def patch(self, request: Request, name: str) -> Response:
        queue_or_404(name)  # an unknown queue is a 404 before the body is judged
        fields = _validated(QueueUpdateSerializer, request.data)
        update = update_queue(name, fields)
        queue = update.queue
        if update.resumed:
            transaction.on_commit(lambda: announce.announce(queue, []))
        return Response(outputs.queue(queue, push_secret=update.new_push_secret))

    def delete(self, request: Request, name: str) -> Response:
        lifecycle.delete_queue(queue_or_404(name))
        return Response(status=204)


@openapi.queue_push_secret_schema
class QueuePushSecretView(APIView):
    roles = {"POST": Role.ADMIN}

    def post(self, request: Request, name: str) -> Response:
        queue_or_404(name)  # an unknown queue is a 404 before the body is judged
        # No body at all reaches DRF as an empty QueryDict; it means the same as {}.
        body = request.data
        _validated(PushSecretSerializer, {} if isinstance(body, QueryDict) and not body else body)
        queue, secret = push_secrets.rotate(name)
        audit.record("queue.push_secret_rotated", audit.api_actor(request), f"queue {name!r}: push secret rotated",
                     queue=name, count=1)  # fmt: skip
        return Response(outputs.queue(queue, push_secret=secret))


@openapi.queue_purge_schema
class QueuePurgeView(APIView):
    roles = {"POST": Role.ADMIN}

    def post(self, request: Request, name: str) -> Response:
        purged = lifecycle.purge(queue_or_404(name))
        audit.record("queue.purged", audit.api_actor(request), f"queue {name!r} purged", queue=name, count=purged)
        return Response({"purged": purged})


@openapi.queue_stats_schema
class QueueStatsView(APIView):
    roles = {"GET": Role.PRODUCER}

    def get(self, request: Request, name: str) -> Response:
        (stats,) = queue_stats([queue_or_404(name)])
        return Response(stats)


HISTORY_PARAMS = frozenset({"since", "step"})
DEFAULT_HISTORY = timedelta(hours=1)


@openapi.queue_history_schema
class QueueHistoryView(APIView):
    """``GET /queues/{name}/history?since=&step=``: per-step figures from the per-minute samples."""

    roles = {"GET": Role.PRODUCER}

    def get(self, request: Request, name: str) -> Response:
        queue = queue_or_404(name)
        params = QueryParams(request.query_params, HISTORY_PARAMS)
        step = timedelta(seconds=params.integer("step", 60, 86400, 60))
        now = database_now()  # Postgres' clock names the samples' minutes
        since = params.timestamp("since") or now - DEFAULT_HISTORY
        if step.total_seconds() % 60:
            raise drf_serializers.ValidationError({"step": ["Must be a whole number of minutes (60, 300, 3600...)."]})
        if since >= now:
            raise drf_serializers.ValidationError({"since": ["Must be in the past."]})
        kept_from = now - timedelta(days=settings.TASKFORGE_HISTORY_DAYS)
        since = max(since, kept_from).replace(second=0, microsecond=0)  # nothing older is kept
        if (now - since) / step > history.MAX_POINTS:
            raise drf_serializers.ValidationError(
                {"step": [f"At most {history.MAX_POINTS} points per answer: choose a larger step or a later since."]}
            )
        points = history.history(queue.name, since, now, step)
        return Response({"queue": queue.name, "since": since, "step": int(step.total_seconds()), "points": points})


# --- tasks ------------------------------------------------------------------------


def _new_task(fields: dict[str, Any], raw_body: Any) -> lifecycle.NewTask:
    return lifecycle.NewTask(
        payload=fields["payload"],
        priority=fields["priority"],
        scheduled_at=fields["scheduled_at"],
        idempotency_key=fields["idempotency_key"],
        max_retries=fields["max_retries"],
        fingerprint=lifecycle.fingerprint(raw_body) if fields["idempotency_key"] is not None else None,
        kind=fields["kind"],
        timeout_seconds=fields["timeout_seconds"],
    )


def enqueue_one(name: str, read_body: Callable[[], Any]) -> tuple[int, dict[str, Any]]:
    """``POST /queues/{name}/tasks`` after authentication: the status and body of the answer.

    The one definition, called by :class:`TaskListView` and by the lean edge
    (``queues.api.hot``). ``read_body`` gives the parsed JSON body; it is read
    only once the queue is known (an unknown queue is a 404 whatever the body).
    Concurrent calls into one queue share their statement and commit
    (``lifecycle.enqueue_single``); each is answered once its task is durable.
    """
    queue = queue_or_404(name)
    return enqueue_answer(queue, *lifecycle.enqueue_single(queue, new_task(read_body)))


def new_task(read_body: Callable[[], Any]) -> lifecycle.NewTask:
    """The task an enqueue's body asks for, validated (a 400 otherwise)."""
    data = read_body()
    return _new_task(validate_enqueue(data), data)


def enqueue_answer(queue: Queue, row: lifecycle.Row, created: bool) -> tuple[int, dict[str, Any]]:
    """A single enqueue's answer: 201 and the task; 200 for a replay of an idempotency key."""
    return 201 if created else 200, outputs.task(row, queue.name)


@openapi.task_list_schema
class TaskListView(APIView):
    roles = {"GET": Role.PRODUCER, "POST": Role.PRODUCER}

    def post(self, request: Request, name: str) -> Response:
        status, body = enqueue_one(name, lambda: request.data)
        return Response(body, status=status)

    def get(self, request: Request, name: str) -> Response:
        queue = queue_or_404(name)
        params = QueryParams(request.query_params, TASK_LIST_PARAMS)
        status = params.choice("status", list(Status.values))
        claimed_by = params.text("claimed_by")
        kind = params.kind()
        payload_contains = params.json_object("payload_contains")
        created_after = params.timestamp("created_after")
        created_before = params.timestamp("created_before")
        limit = params.limit()
        cursor = params.cursor()
        rows = queue.tasks.all()
        if status:
            rows = rows.filter(status=status)
        if claimed_by:
            rows = rows.filter(claimed_by=claimed_by)
        if kind:
            rows = rows.filter(kind=kind)
        if payload_contains:
            rows = rows.filter(payload__contains=payload_contains)  # jsonb @>, served by tf_task_payload
        if created_after:
            rows = rows.filter(created_at__gt=created_after)
        if created_before:
            rows = rows.filter(created_at__lt=created_before)
        if cursor:
            at, row_id = cursor
            rows = rows.filter(Q(created_at__lt=at) | Q(created_at=at, id__lt=row_id))
        page = pages.bounded_page(rows, "created_at", "id", pages.TASK_BYTES, limit)
        found = {row["id"]: row for row in queue.tasks.filter(id__in=page.keys).values()}
        return Response(
            {
                "results": [outputs.task(found[key], queue.name) for key in page.keys if key in found],
                "next": encode_cursor(*page.next_after) if page.next_after else None,
            }
        )


@openapi.task_batch_schema
class TaskBatchView(APIView):
    roles = {"POST": Role.PRODUCER}

    def post(self, request: Request, name: str) -> Response:
        status, body = enqueue_batch(name, lambda: request.data)
        return Response(body, status=status)


def enqueue_batch(name: str, read_body: Callable[[], Any]) -> tuple[int, dict[str, Any]]:
    """``POST /queues/{name}/tasks/batch`` after authentication: the status and body of the answer.

    The one definition, called by :class:`TaskBatchView` and by the lean edge
    (``queues.api.hot``); ``read_body`` as for :func:`enqueue_one`. All the
    tasks or none: one invalid item fails the batch with its errors keyed by
    index, and the tasks are inserted by one statement.
    """
    queue = queue_or_404(name)
    serializer = EnqueueBatchSerializer(data=read_body())
    if not serializer.is_valid():
        errors = serializer.errors
        # Item errors are reported by index ("3.priority"), not under "tasks".
        raise drf_serializers.ValidationError(errors["tasks"] if isinstance(errors.get("tasks"), dict) else errors)
    items = serializer.validated_data["tasks"]
    outcomes = lifecycle.enqueue(queue, [_new_task(item, item["_raw"]) for item in items])
    return 201, {"tasks": [outputs.task(row, queue.name) for row, _ in outcomes]}


def _read(request: Request, queue_name: str | None, task_id: str) -> Response | HttpResponse:
    """One attempt of a task read (``queues.api.results``): the task, or "wait" for the long-poll loop."""
    outcome = read_task_once(queue_name, task_id, request.query_params, longpoll.attempt(request))
    if isinstance(outcome, longpoll.WaitFor):
        return longpoll.must_wait(outcome)
    status, body = outcome
    return Response(body, status=status)


@openapi.task_detail_schema
class TaskDetailView(longpoll.LongPollView):
    """Read (and wait for) one task of a queue, or cancel it; a read may wait (``wait_seconds``)."""

    roles = {"GET": Role.PRODUCER, "DELETE": Role.PRODUCER}

    def get(self, request: Request, name: str, task_id: str) -> Response | HttpResponse:
        return _read(request, name, task_id)

    def delete(self, request: Request, name: str, task_id: str) -> Response:
        queue = queue_or_404(name)
        row, at_once = lifecycle.cancel_or_request(queue, task_id_or_404(task_id))
        # 202: a running task was asked to stop (cancel_requested); its worker's nack cancels it.
        return Response(outputs.task(row, queue.name), status=200 if at_once else 202)


@openapi.task_by_id_schema
class TaskByIdView(longpoll.LongPollView):
    """Read (and wait for) one task by id, whatever its queue."""

    roles = {"GET": Role.PRODUCER}

    def get(self, request: Request, task_id: str) -> Response | HttpResponse:
        return _read(request, None, task_id)


# --- dead-letter queue -----------------------------------------------------------------


@openapi.dlq_list_schema
class DeadLetterListView(APIView):
    roles = {"GET": Role.ADMIN}

    def get(self, request: Request, name: str) -> Response:
        queue = queue_or_404(name)
        params = QueryParams(request.query_params, DLQ_LIST_PARAMS)
        include_replayed = params.boolean("include_replayed")
        kind = params.kind()
        died_after = params.timestamp("died_after")
        died_before = params.timestamp("died_before")
        limit = params.limit()
        cursor = params.cursor()
        entries = DeadLetterTask.objects.filter(queue=queue)
        if not include_replayed:
            entries = entries.filter(task__status=Status.DEAD)
        if kind:
            entries = entries.filter(task__kind=kind)
        if died_after:
            entries = entries.filter(died_at__gt=died_after)
        if died_before:
            entries = entries.filter(died_at__lt=died_before)
        if cursor:
            at, row_id = cursor
            entries = entries.filter(Q(died_at__lt=at) | Q(died_at=at, task_id__lt=row_id))
        page = pages.bounded_page(entries, "died_at", "task_id", pages.DEAD_LETTER_BYTES, limit)
        found = {entry.task_id: entry for entry in DeadLetterTask.objects.filter(task_id__in=page.keys)}
        return Response(
            {
                "results": [outputs.dead_letter(found[key], queue.name) for key in page.keys if key in found],
                "next": encode_cursor(*page.next_after) if page.next_after else None,
            }
        )


@openapi.dlq_replay_schema
class DeadLetterReplayView(APIView):
    roles = {"POST": Role.ADMIN}

    def post(self, request: Request, name: str, task_id: str) -> Response:
        queue = queue_or_404(name)
        row = lifecycle.replay(queue, task_id_or_404(task_id), actor=audit.api_actor(request))
        audit.record("dlq.replayed", audit.api_actor(request), f"task {row['id']} replayed", queue=name, count=1)
        return Response(outputs.task(row, queue.name))


@openapi.dlq_bulk_replay_schema
class DeadLetterBulkReplayView(APIView):
    roles = {"POST": Role.ADMIN}

    def post(self, request: Request, name: str) -> Response:
        queue = queue_or_404(name)
        fields = _validated(BulkReplaySerializer, request.data)
        replayed = lifecycle.replay_many(queue, fields.get("ids"), actor=audit.api_actor(request))
        audit.record(
            "dlq.replayed", audit.api_actor(request), f"{replayed} dead task(s) replayed", queue=name, count=replayed
        )
        return Response({"replayed": replayed})


@openapi.dlq_detail_schema
class DeadLetterDetailView(APIView):
    roles = {"DELETE": Role.ADMIN}

    def delete(self, request: Request, name: str, task_id: str) -> Response:
        lifecycle.discard(queue_or_404(name), task_id_or_404(task_id))
        audit.record("dlq.discarded", audit.api_actor(request), f"task {task_id} discarded", queue=name, count=1)
        return Response(status=204)
