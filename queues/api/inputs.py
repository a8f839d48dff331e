"""Input shapes of the queue, task and DLQ endpoints (shape only: no logic)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.utils import timezone
from rest_framework import serializers

from queues.models import queue_name_validator, task_kind_validator
from taskforge.http.fields import (
    AwareDateTimeField,
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    StrictUUIDField,
)

MAX_SCHEDULE_AHEAD = timedelta(days=365)
MAX_DELAY_MS = 30 * 86_400_000
# An attempt's execution time limit (queues and enqueue bodies), in seconds.
MAX_TIMEOUT_SECONDS = 86_400


# A push queue's target and extra headers (API.md, "Push queues").
MAX_PUSH_URL_LENGTH = 2048
MAX_PUSH_HEADERS = 20
MAX_PUSH_HEADER_VALUE_LENGTH = 1024
_HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,100}")
# Visible ASCII, spaces and tabs only: a CR or LF would let a value inject headers of its own.
_HEADER_VALUE = re.compile(r"[\x20-\x7e\t]*")
# The pusher writes these itself (framing, routing, the signed TaskForge- headers).
FORBIDDEN_PUSH_HEADERS = frozenset({"host", "content-length", "content-type", "transfer-encoding", "connection"})


class PushHeadersField(serializers.Field):
    default_error_messages = {"invalid": "Must be a JSON object of header names to string values."}

    def to_internal_value(self, data: Any) -> dict[str, str]:
        if not isinstance(data, dict):
            self.fail("invalid")
        if len(data) > MAX_PUSH_HEADERS:
            raise serializers.ValidationError(f"At most {MAX_PUSH_HEADERS} headers.")
        seen: set[str] = set()
        for name, value in data.items():
            lowered = name.lower()
            if not _HEADER_NAME.fullmatch(name):
                raise serializers.ValidationError(f"Header name {name!r}: 1-100 letters, digits or '-'.")
            if lowered in FORBIDDEN_PUSH_HEADERS or lowered.startswith("taskforge-"):
                raise serializers.ValidationError(f"Header {name!r} is set by TaskForge and cannot be given.")
            if lowered in seen:
                raise serializers.ValidationError(f"Header {name!r} is given twice.")
            seen.add(lowered)
            if not isinstance(value, str):
                raise serializers.ValidationError(f"Header {name!r}: the value must be a string.")
            if len(value) > MAX_PUSH_HEADER_VALUE_LENGTH or not _HEADER_VALUE.fullmatch(value):
                raise serializers.ValidationError(
                    f"Header {name!r}: at most {MAX_PUSH_HEADER_VALUE_LENGTH} visible ASCII characters, spaces or tabs."
                )
        return dict(data)

    def to_representation(self, value: Any) -> Any:
        return value


class PushSerializer(StrictSerializer):
    """A queue's ``push``: where and how the pusher delivers its tasks."""

    url = StrictCharField(max_length=MAX_PUSH_URL_LENGTH, trim_whitespace=False)
    timeout_seconds = StrictIntegerField(min_value=1, max_value=1800, required=False, default=30)
    max_concurrent = StrictIntegerField(min_value=1, max_value=1000, required=False, default=10)
    headers = PushHeadersField(required=False, default=dict)

    def validate_url(self, value: str) -> str:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018  # raises on a port out of range
        except ValueError:
            raise serializers.ValidationError("Must be an http or https URL.") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise serializers.ValidationError("Must be an http or https URL with a host.")
        if parts.username is not None or parts.password is not None:
            raise serializers.ValidationError("Must not carry credentials; give them as a header.")
        if parts.fragment or any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
            raise serializers.ValidationError("Must not contain spaces, control characters or a fragment.")
        if not value.isascii():
            raise serializers.ValidationError("Must be ASCII (percent-encode the path, punycode the host).")
        return value


class QueueUpdateSerializer(StrictSerializer):
    max_retries = StrictIntegerField(min_value=0, max_value=25, required=False)
    rate_limit = StrictIntegerField(min_value=1, max_value=100_000, required=False, allow_null=True)
    rate_burst = StrictIntegerField(min_value=1, max_value=100_000, required=False, allow_null=True)
    paused = StrictBooleanField(required=False)
    retry_base_ms = StrictIntegerField(min_value=1, max_value=3_600_000, required=False)
    retry_max_delay_ms = StrictIntegerField(min_value=1, max_value=MAX_DELAY_MS, required=False)
    timeout_seconds = StrictIntegerField(min_value=1, max_value=MAX_TIMEOUT_SECONDS, required=False, allow_null=True)
    # null: workers pull (the default); an object: the pusher delivers over HTTP. A PATCH replaces it whole.
    push = PushSerializer(required=False, allow_null=True)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict) and "name" in data and "name" not in self.fields:
            raise serializers.ValidationError({"name": ["A queue's name cannot be changed."]})
        return super().to_internal_value(data)


class QueueCreateSerializer(QueueUpdateSerializer):
    name = StrictCharField(max_length=64, validators=[queue_name_validator])


class EnqueueSerializer(StrictSerializer):
    payload = JSONObjectField()
    priority = StrictIntegerField(min_value=1, max_value=10, required=False, default=5)
    scheduled_at = AwareDateTimeField(required=False, allow_null=True, default=None)
    idempotency_key = StrictCharField(
        max_length=255, required=False, allow_null=True, default=None, trim_whitespace=False
    )
    max_retries = StrictIntegerField(min_value=0, max_value=25, required=False, allow_null=True, default=None)
    kind = StrictCharField(
        max_length=128, required=False, allow_null=True, default=None, trim_whitespace=False,
        validators=[task_kind_validator],
    )  # fmt: skip
    # Overrides the queue's timeout_seconds for this task.
    timeout_seconds = StrictIntegerField(
        min_value=1, max_value=MAX_TIMEOUT_SECONDS, required=False, allow_null=True, default=None
    )

    def validate_scheduled_at(self, value: Any) -> Any:
        if value is not None and value > timezone.now() + MAX_SCHEDULE_AHEAD:
            raise serializers.ValidationError("Must be at most 365 days ahead.")
        return value


_checkers: dict[type[serializers.Serializer], serializers.Serializer] = {}


def validated(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """``data`` validated by ``serializer_class``: its fields, or its ValidationError (as ``is_valid`` raises it).

    One instance of each serializer checks every body: building one per
    request deep-copies its fields, most of what validation cost (some
    150 µs against 15-30 µs). Validating keeps no state on the instance.
    """
    checker = _checkers.get(serializer_class)
    if checker is None:
        checker = serializer_class()
        _ = checker.fields  # built once, before threads share it
        checker = _checkers.setdefault(serializer_class, checker)
    return dict(checker.run_validation(data))


def _plain_int(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _plain_key(value: Any) -> bool:
    return type(value) is str and 0 < len(value) <= 255 and value.isascii() and "\x00" not in value


_ENQUEUE_FIELDS = frozenset(("payload", "priority", "scheduled_at", "idempotency_key", "max_retries"))


def plain_enqueue(raw: Any) -> dict[str, Any] | None:
    """The validated form of a common enqueue body, or None: then EnqueueSerializer decides.

    Only a shortcut, not a second definition: it accepts a subset of what
    :class:`EnqueueSerializer` accepts, with the same result (no
    ``scheduled_at``, plain values), and leaves everything else, valid or
    not, to the serializer, which also words the errors
    (tests/unit/api/test_plain_enqueue.py checks that on every combination
    of common and edge values). It matters for batches: some 15 µs per item.
    """
    if type(raw) is not dict or not _ENQUEUE_FIELDS.issuperset(raw) or type(raw.get("payload")) is not dict:
        return None
    priority = raw.get("priority", 5)
    key = raw.get("idempotency_key")
    retries = raw.get("max_retries")
    if raw.get("scheduled_at") is not None or not _plain_int(priority, 1, 10):
        return None
    if (key is not None and not _plain_key(key)) or (retries is not None and not _plain_int(retries, 0, 25)):
        return None
    return {"payload": raw["payload"], "priority": priority, "scheduled_at": None, "idempotency_key": key,
            "max_retries": retries, "kind": None, "timeout_seconds": None}  # fmt: skip


def validate_enqueue(raw: Any) -> dict[str, Any]:
    """One enqueue body (single or a batch's item) validated: EnqueueSerializer's rules, its errors."""
    return plain_enqueue(raw) or validated(EnqueueSerializer, raw)


class AnyJSONField(serializers.Field):
    """Any JSON value, as parsed (the parser already refused what is not JSON)."""

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class EnqueueBatchSerializer(StrictSerializer):
    """``{"tasks": [enqueue body, ...]}``; errors keyed by index (``"3.priority"``)."""

    tasks = serializers.ListField(child=AnyJSONField(), min_length=1, max_length=1000)

    def validate_tasks(self, value: list[Any]) -> list[dict[str, Any]]:
        errors: dict[str, list[str]] = {}
        items: list[dict[str, Any]] = []
        first_with_key: dict[str, int] = {}
        for index, raw in enumerate(value):
            try:
                item = validate_enqueue(raw)
            except serializers.ValidationError as exc:
                for name, messages in serializers.as_serializer_error(exc).items():
                    field = str(index) if name == "non_field_errors" else f"{index}.{name}"
                    errors[field] = [str(message) for message in messages]
                continue
            key = item["idempotency_key"]
            if key is not None and key in first_with_key:
                errors[f"{index}.idempotency_key"] = [
                    f"Duplicates the idempotency_key of item {first_with_key[key]} in this batch."
                ]
            elif key is not None:
                first_with_key[key] = index
            items.append({**item, "_raw": raw})
        if errors:
            raise serializers.ValidationError(errors)
        return items


class PushSecretSerializer(StrictSerializer):
    """``POST /queues/{name}/push-secret`` takes no fields (an empty object or no body)."""


class BulkReplaySerializer(StrictSerializer):
    ids = serializers.ListField(
        child=StrictUUIDField(), required=False, allow_empty=False, min_length=1, max_length=1000
    )
    all = StrictBooleanField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        has_ids = "ids" in attrs
        wants_all = attrs.get("all") is True
        if has_ids and "all" in attrs:
            raise serializers.ValidationError("Give either ids or all, not both.")
        if not has_ids and not wants_all:
            raise serializers.ValidationError('Give "ids": [...] or "all": true.')
        return attrs
