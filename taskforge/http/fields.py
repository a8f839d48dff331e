"""Strict serializer fields: the contract forbids coercion (``"5"`` is not 5).

Shared by every app's input serializers, together with ``StrictSerializer``,
which refuses unknown fields by name.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rest_framework import serializers


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictUUIDField(serializers.UUIDField):
    """A UUID given as a string: DRF's own field would also turn an integer into a UUID."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


class JSONObjectField(serializers.Field):  # type: ignore[type-arg]  # DRF's classes are generic in its stubs only
    default_error_messages = {"invalid": "Must be a JSON object."}

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            self.fail("invalid")
        return data

    def to_representation(self, value: Any) -> Any:
        return value


def parse_aware_datetime(value: Any) -> datetime:
    """ISO 8601 with an explicit offset; raises ValueError otherwise."""
    if not isinstance(value, str):
        raise ValueError("must be an ISO 8601 timestamp string")
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError("must carry an explicit offset (Z or +00:00)")
    # In UTC: Python takes offsets up to +-23:59, Postgres only up to +-15:59 (a
    # 500 otherwise, found by make fuzz). Year 1 or 9999 shifted off the calendar
    # becomes its first or last instant (a far-past scheduled_at still means now).
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        return (datetime.min if parsed.year == 1 else datetime.max).replace(tzinfo=UTC)


class AwareDateTimeField(serializers.Field):  # type: ignore[type-arg]  # DRF's classes are generic in its stubs only
    default_error_messages = {
        "invalid": "Must be an ISO 8601 timestamp with an explicit offset, e.g. 2026-05-20T12:00:00Z."
    }

    def to_internal_value(self, data: Any) -> datetime:
        try:
            return parse_aware_datetime(data)
        except ValueError:
            self.fail("invalid")
            raise  # unreachable: fail() raises

    def to_representation(self, value: Any) -> Any:
        return value


class StrictSerializer(serializers.Serializer):  # type: ignore[type-arg]  # DRF's classes are generic in its stubs only
    """Refuses a non-object body and any field it does not declare."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        unknown = sorted(set(data) - set(self.fields))
        read_only = [name for name in unknown]
        if read_only:
            raise serializers.ValidationError({name: ["Unknown or read-only field."] for name in read_only})
        return super().to_internal_value(data)
