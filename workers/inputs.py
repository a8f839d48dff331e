"""Input shapes of the worker protocol."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import orjson
from django.conf import settings
from rest_framework import serializers

from queues.api.inputs import validated
from taskforge.http.fields import (
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
)

MAX_RETRY_AFTER_SECONDS = 2_592_000
# A heartbeat's progress object, serialized (compact JSON, UTF-8).
MAX_PROGRESS_BYTES = 4096
# The most items of one batch ack or nack (the protocol's limit).
MAX_BATCH_ITEMS = 100


class ProgressField(JSONObjectField):
    """A JSON object of at most ``MAX_PROGRESS_BYTES`` serialized: what a heartbeat reports of the work done."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        value = super().to_internal_value(data)
        if len(orjson.dumps(value)) > MAX_PROGRESS_BYTES:
            raise serializers.ValidationError(f"Must be at most {MAX_PROGRESS_BYTES} bytes serialized.")
        return value


class WorkerIdentity(StrictSerializer):
    worker_id = StrictCharField(min_length=1, max_length=200, trim_whitespace=False)


class ClaimSerializer(WorkerIdentity):
    queue = StrictCharField(required=False, allow_null=True, default=None, max_length=200)
    max_tasks = StrictIntegerField(min_value=1, max_value=100, required=False, default=1)
    wait_seconds = StrictIntegerField(min_value=0, max_value=30, required=False, default=0)


class LeaseItemSerializer(StrictSerializer):
    task_id = serializers.UUIDField(format="hex_verbose")
    lease_token = StrictCharField(required=False, allow_null=True, default=None, max_length=64)

    def to_internal_value(self, data):
        # A UUID must arrive as a string; DRF would also take an integer.
        if isinstance(data, dict) and not isinstance(data.get("task_id", ""), str):
            raise serializers.ValidationError({"task_id": ["Must be a UUID string."]})
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # The contract lets a call name no lease (the worker id alone then owns it); a deployment
        # whose workers all send tokens can insist, so two processes sharing a worker id cannot
        # both have their calls accepted.
        if settings.TASKFORGE_REQUIRE_LEASE_TOKEN and attrs.get("lease_token") is None:
            raise serializers.ValidationError(
                {"lease_token": ["Required here (TASKFORGE_REQUIRE_LEASE_TOKEN): send the claim's lease_token."]}
            )
        return attrs


class HeartbeatSerializer(WorkerIdentity, LeaseItemSerializer):
    # The latest progress becomes the task's ``progress``; null or absent keeps the last one.
    progress = ProgressField(
        required=False,
        allow_null=True,
        default=None,
        help_text="What the work has done so far, any JSON object of at most 4 KiB serialized; null keeps the last.",
    )


class AckItemSerializer(LeaseItemSerializer):
    result = JSONObjectField(required=False, allow_null=True, default=None)


class AckSerializer(WorkerIdentity, AckItemSerializer):
    pass


class NackItemSerializer(LeaseItemSerializer):
    error = StrictCharField(min_length=1, max_length=65536, trim_whitespace=False)
    retry = StrictBooleanField(required=False, default=True)
    retry_after_seconds = StrictIntegerField(
        min_value=0, max_value=MAX_RETRY_AFTER_SECONDS, required=False, allow_null=True, default=None
    )
    # The worker never started the task (it held it prefetched, or took it while shutting down):
    # hand it back without using up the attempt its claim counted.
    release = StrictBooleanField(
        required=False,
        default=False,
        help_text="True: the worker never started the task (held it prefetched, or took it while shutting down). "
        "It is put back (retry, due at once or after retry_after_seconds) and the attempt its claim counted is "
        "given back, so handing it back never sends it to the dead-letter queue. Not with retry: false.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if attrs.get("release") and attrs.get("retry") is False:
            raise serializers.ValidationError(
                {"release": ["A released task is retried: release cannot be combined with retry: false."]}
            )
        return attrs


class NackSerializer(WorkerIdentity, NackItemSerializer):
    pass


class AckBatchSerializer(WorkerIdentity):
    items = AckItemSerializer(many=True, allow_empty=False, max_length=MAX_BATCH_ITEMS)  # type: ignore[call-arg]  # many=True builds a ListSerializer, which takes max_length


class NackBatchSerializer(WorkerIdentity):
    items = NackItemSerializer(many=True, allow_empty=False, max_length=MAX_BATCH_ITEMS)  # type: ignore[call-arg]  # many=True builds a ListSerializer, which takes max_length


BatchSerializer = type[AckBatchSerializer | NackBatchSerializer]


# --- the common single-call bodies, without DRF ---------------------------------------------
# DRF spent 16-70 µs on one of these bodies, up to a twentieth of the call.


def validate_claim(raw: Any) -> dict[str, Any]:
    """A claim's body validated: :class:`ClaimSerializer`'s rules, its errors."""
    return plain_claim(raw) or validated(ClaimSerializer, raw)


def plain_claim(raw: Any) -> dict[str, Any] | None:
    """The validated form of a common claim body, or None: then :class:`ClaimSerializer` decides.

    A shortcut as :func:`plain_lease_call` is (checked against the serializer
    in the same test): plain ASCII names, integers in range, nothing else.
    """
    if type(raw) is not dict or not _CLAIM_FIELDS.issuperset(raw):
        return None
    worker_id, queue = raw.get("worker_id"), raw.get("queue")
    max_tasks, wait = raw.get("max_tasks", 1), raw.get("wait_seconds", 0)
    if not _plain_text(worker_id, 200) or not (queue is None or (_plain_text(queue, 200) and queue == queue.strip())):
        return None
    if not (type(max_tasks) is int and 1 <= max_tasks <= 100 and type(wait) is int and 0 <= wait <= 30):
        return None
    return {"worker_id": worker_id, "queue": queue, "max_tasks": max_tasks, "wait_seconds": wait}


def validate_lease_call(serializer_class: type[LeaseItemSerializer], raw: Any) -> dict[str, Any]:
    """A heartbeat's, ack's or nack's body validated: ``serializer_class``'s rules, its errors."""
    return plain_lease_call(serializer_class, raw) or validated(serializer_class, raw)


def plain_lease_call(serializer_class: type[LeaseItemSerializer], raw: Any) -> dict[str, Any] | None:
    """The validated form of a common heartbeat, ack or nack body, or None: then the serializer decides.

    Only a shortcut, not a second definition (as ``queues.api.inputs.plain_enqueue``):
    it accepts a subset of what :class:`HeartbeatSerializer`, :class:`AckSerializer`
    or :class:`NackSerializer` accepts (plain ASCII strings, a task id in its
    canonical form, values of the exact types), with the same result, and
    leaves everything else, valid or not, to the serializer, which also words
    the errors (tests/unit/workers/test_plain_worker_bodies.py checks that on
    every combination of common and edge values).
    """
    extra = _PLAIN_EXTRAS.get(serializer_class)
    if extra is None or type(raw) is not dict or not extra[0].issuperset(raw):
        return None
    worker_id, task_id, token = raw.get("worker_id"), raw.get("task_id"), raw.get("lease_token")
    if not _plain_text(worker_id, 200) or type(task_id) is not str or len(task_id) != 36:
        return None
    if token is None:
        if settings.TASKFORGE_REQUIRE_LEASE_TOKEN:
            return None
    elif not _plain_text(token, 64) or token != token.strip():  # DRF trims a token's whitespace
        return None
    try:
        task_uuid = uuid.UUID(task_id)
    except ValueError:
        return None
    rest = extra[1](raw)
    if rest is None:
        return None
    return {"worker_id": worker_id, "task_id": task_uuid, "lease_token": token, **rest}


def validate_lease_batch(serializer_class: BatchSerializer, raw: Any) -> dict[str, Any]:
    """A batch ack's or nack's body validated: ``serializer_class``'s rules, its errors."""
    quick = plain_lease_batch(serializer_class, raw)
    if quick is not None:
        return quick
    # A serializer of its own, not queues.api.inputs.validated's shared one: is_valid words a JSON
    # null body "No data provided", as this endpoint always answered; run_validation would not.
    serializer = serializer_class(data=raw)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def plain_lease_batch(serializer_class: BatchSerializer, raw: Any) -> dict[str, Any] | None:
    """The validated form of a common batch ack or nack body, or None: then the serializer decides.

    A shortcut as :func:`plain_lease_call` is, item by item, with the same
    result: DRF built and ran a nested serializer per item, about 22 µs of
    each acked task's CPU in a batch of 100 (a tenth of what a drained task
    costs the API). Checked against both serializers in the same test
    (tests/unit/workers/test_plain_worker_bodies.py).
    """
    single = _BATCH_ITEMS.get(serializer_class)
    if single is None or type(raw) is not dict or raw.keys() != _BATCH_FIELDS:
        return None
    worker_id, items = raw["worker_id"], raw["items"]
    if type(items) is not list or not 1 <= len(items) <= MAX_BATCH_ITEMS:
        return None
    validated_items = []
    for item in items:
        if type(item) is not dict or "worker_id" in item:  # an item names no worker: the serializer refuses it
            return None
        one = plain_lease_call(single, {**item, "worker_id": worker_id})
        if one is None:
            return None
        del one["worker_id"]
        validated_items.append(one)
    return {"worker_id": worker_id, "items": validated_items}


def _plain_text(value: Any, longest: int) -> bool:
    return type(value) is str and 0 < len(value) <= longest and value.isascii() and "\x00" not in value


def _plain_object(value: Any) -> bool:
    return value is None or type(value) is dict


def _heartbeat_rest(raw: dict[str, Any]) -> dict[str, Any] | None:
    progress = raw.get("progress")
    if not _plain_object(progress) or (progress is not None and len(orjson.dumps(progress)) > MAX_PROGRESS_BYTES):
        return None
    return {"progress": progress}


def _ack_rest(raw: dict[str, Any]) -> dict[str, Any] | None:
    result = raw.get("result")
    return {"result": result} if _plain_object(result) else None


def _nack_rest(raw: dict[str, Any]) -> dict[str, Any] | None:
    error, retry, delay, release = (
        raw.get("error"),
        raw.get("retry", True),
        raw.get("retry_after_seconds"),
        raw.get("release", False),
    )
    if not _plain_text(error, 65536) or type(retry) is not bool or type(release) is not bool or (release and not retry):
        return None
    if delay is not None and not (type(delay) is int and 0 <= delay <= MAX_RETRY_AFTER_SECONDS):
        return None
    return {"error": error, "retry": retry, "retry_after_seconds": delay, "release": release}


_CLAIM_FIELDS = frozenset(("worker_id", "queue", "max_tasks", "wait_seconds"))
_LEASE_FIELDS = frozenset(("worker_id", "task_id", "lease_token"))
_PLAIN_EXTRAS: dict[
    type[LeaseItemSerializer], tuple[frozenset[str], Callable[[dict[str, Any]], dict[str, Any] | None]]
] = {
    HeartbeatSerializer: (_LEASE_FIELDS | {"progress"}, _heartbeat_rest),
    AckSerializer: (_LEASE_FIELDS | {"result"}, _ack_rest),
    NackSerializer: (_LEASE_FIELDS | {"error", "retry", "retry_after_seconds", "release"}, _nack_rest),
}
_BATCH_FIELDS = frozenset(("worker_id", "items"))
_BATCH_ITEMS: dict[type[StrictSerializer], type[LeaseItemSerializer]] = {
    AckBatchSerializer: AckSerializer,
    NackBatchSerializer: NackSerializer,
}
