"""Input shapes of the worker protocol."""

from __future__ import annotations

from typing import Any

import orjson
from django.conf import settings
from rest_framework import serializers

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
    items = AckItemSerializer(many=True, allow_empty=False, max_length=100)  # type: ignore[call-arg]  # many=True builds a ListSerializer, which takes max_length


class NackBatchSerializer(WorkerIdentity):
    items = NackItemSerializer(many=True, allow_empty=False, max_length=100)  # type: ignore[call-arg]  # many=True builds a ListSerializer, which takes max_length
