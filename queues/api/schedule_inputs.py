"""Input shapes of the schedule endpoints (shape and single-field rules only).

Whether the merged result has exactly one of ``cron`` and ``every_seconds``
is judged by ``queues.api.schedule_changes``, which sees the stored row too.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from queues.models import schedule_name_validator, task_kind_validator
from queues.schedules import timing
from taskforge.http.fields import (
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
)


class StrictChoiceField(StrictCharField):
    """One of ``choices``, given as a string (a number or a list is a type error, not a bad choice)."""

    def __init__(self, *, choices: tuple[str, ...], **kwargs: Any) -> None:
        self.choices = choices
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if value not in self.choices:
            raise serializers.ValidationError(f"Must be one of: {', '.join(self.choices)}.")
        return value


class ScheduleUpdateSerializer(StrictSerializer):
    queue = StrictCharField(max_length=64, required=False, trim_whitespace=False)
    cron = StrictCharField(max_length=200, required=False, allow_null=True, trim_whitespace=False)
    every_seconds = StrictIntegerField(
        min_value=timing.MIN_EVERY_SECONDS, max_value=timing.MAX_EVERY_SECONDS, required=False, allow_null=True
    )
    timezone = StrictCharField(max_length=64, required=False, trim_whitespace=False)
    payload = JSONObjectField(required=False)
    kind = StrictCharField(
        max_length=128, required=False, allow_null=True, trim_whitespace=False, validators=[task_kind_validator]
    )
    priority = StrictIntegerField(min_value=1, max_value=10, required=False)
    paused = StrictBooleanField(required=False)
    catch_up = StrictChoiceField(choices=timing.CATCH_UP_POLICIES, required=False)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict) and "name" in data and "name" not in self.fields:
            raise serializers.ValidationError({"name": ["A schedule's name cannot be changed."]})
        return super().to_internal_value(data)

    def validate_cron(self, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return timing.check_cron(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate_timezone(self, value: str) -> str:
        try:
            timing.check_timezone(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None
        return value


class ScheduleTriggerSerializer(StrictSerializer):
    """A trigger takes no fields: no body, or ``{}`` (a field, say a payload override, is a 400 naming it)."""


class ScheduleCreateSerializer(ScheduleUpdateSerializer):
    name = StrictCharField(max_length=64, validators=[schedule_name_validator], trim_whitespace=False)
    queue = StrictCharField(max_length=64, trim_whitespace=False)
