"""OpenAPI annotations and shapes of the schedule endpoints (``/schedules``).

As in ``queues.api.openapi``: one ``*_schema`` decorator per view, the roles
taken from the views when the document is built.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers

from queues.api.openapi_components import BODY_ERRORS, ObjectField, Task, errors
from queues.api.schedule_inputs import ScheduleCreateSerializer, ScheduleUpdateSerializer
from queues.schedules import timing

SCHEDULE_NAME = OpenApiParameter(
    "name", OpenApiTypes.STR, OpenApiParameter.PATH, description="The schedule's name (1-64 letters, digits, - or _)."
)


class StrictChoiceFieldSchema(OpenApiSerializerFieldExtension):
    """A choice given as a string: an enum of strings (``catch_up``)."""

    target_class = "queues.api.schedule_inputs.StrictChoiceField"

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.target.choices)}


class Schedule(serializers.Serializer):
    name = serializers.CharField()
    queue = serializers.CharField(help_text="The queue its tasks go to.")
    cron = serializers.CharField(
        allow_null=True, help_text="5 fields, or 6 with seconds first; null when every_seconds is set."
    )
    every_seconds = serializers.IntegerField(
        allow_null=True,
        help_text="Fire every N seconds (1-86400), the first time N seconds after creation; null with cron.",
    )
    timezone = serializers.CharField(help_text="The IANA time zone the cron expression is read in.")
    payload = ObjectField(help_text="Each task's payload.")
    kind = serializers.CharField(allow_null=True, help_text="Each task's kind.")
    priority = serializers.IntegerField(min_value=1, max_value=10)
    paused = serializers.BooleanField()
    catch_up = serializers.ChoiceField(choices=list(timing.CATCH_UP_POLICIES))
    next_run_at = serializers.DateTimeField(allow_null=True, help_text="The next fire time; null while paused.")
    last_run_at = serializers.DateTimeField(
        allow_null=True, help_text="The fire time of the latest task (a trigger's: when it ran); null before any."
    )
    last_task_id = serializers.UUIDField(allow_null=True, help_text="The latest task it enqueued; null before any.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ScheduleList(serializers.Serializer):
    results = Schedule(many=True)


schedule_list_schema = extend_schema_view(
    get=extend_schema(
        tags=["schedules"],
        operation_id="list_schedules",
        summary="List periodic schedules",
        description="Every schedule, by name.",
        responses={200: ScheduleList, **errors()},
    ),
    post=extend_schema(
        tags=["schedules"],
        operation_id="create_schedule",
        summary="Create a periodic schedule",
        description=(
            "Exactly one of `cron` and `every_seconds`. Each fire enqueues one task into `queue` with "
            "`idempotency_key` `schedule:{name}:{fire time}`; `catch_up` says what happens to fire times "
            "missed while no scheduler ran."
        ),
        request=ScheduleCreateSerializer,
        responses={
            201: Schedule,
            **errors(*BODY_ERRORS, 404, 409, conflict="The name is taken."),
        },
        examples=[
            OpenApiExample(
                "Nightly report",
                value={
                    "name": "nightly-report",
                    "queue": "reports",
                    "cron": "0 3 * * *",
                    "timezone": "Europe/Berlin",
                    "payload": {"report": "daily"},
                    "kind": "reports.nightly",
                },
                request_only=True,
            )
        ],
    ),
)

schedule_detail_schema = extend_schema_view(
    get=extend_schema(
        tags=["schedules"],
        operation_id="get_schedule",
        summary="Read a schedule",
        description="One schedule, with its next fire time.",
        parameters=[SCHEDULE_NAME],
        responses={200: Schedule, **errors(404)},
    ),
    patch=extend_schema(
        tags=["schedules"],
        operation_id="update_schedule",
        summary="Change a schedule, pause or resume it",
        description=(
            "The name cannot change. Setting `cron` clears `every_seconds` and the other way round (unless "
            "both are given); `next_run_at` is recomputed when the timing or `paused` changes. "
            "A resumed schedule fires from now on: what it would have fired while paused is not caught up."
        ),
        parameters=[SCHEDULE_NAME],
        request=ScheduleUpdateSerializer,
        responses={200: Schedule, **errors(*BODY_ERRORS, 404)},
    ),
    delete=extend_schema(
        tags=["schedules"],
        operation_id="delete_schedule",
        summary="Delete a schedule",
        description="The tasks it enqueued stay.",
        parameters=[SCHEDULE_NAME],
        responses={204: OpenApiResponse(description="Deleted."), **errors(404)},
    ),
)

schedule_trigger_schema = extend_schema_view(
    post=extend_schema(
        tags=["schedules"],
        operation_id="trigger_schedule",
        summary="Run a schedule once now",
        description=(
            "Enqueues one task as a fire would, without an idempotency key (each trigger is a task of its own); "
            "`next_run_at` does not change. Works on paused schedules too. No body is needed "
            "(`{}` is fine; any field is a 400)."
        ),
        parameters=[SCHEDULE_NAME],
        request=None,
        responses={
            201: OpenApiResponse(Task, description="The task, as an enqueue answers."),
            **errors(*BODY_ERRORS, 404),
        },
    ),
)
