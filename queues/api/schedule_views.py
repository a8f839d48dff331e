"""Periodic schedule endpoints (``/schedules``, admin role): validate, change, render."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers as drf_serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from queues.api import outputs, schedule_openapi
from queues.api.schedule_changes import create_schedule, delete_schedule, schedule_or_404, update_schedule
from queues.api.schedule_inputs import ScheduleCreateSerializer, ScheduleTriggerSerializer, ScheduleUpdateSerializer
from queues.apikeys import Role
from queues.models import Schedule
from queues.schedules import firing
from taskforge.ops import audit


def _validated(serializer_class: type[drf_serializers.Serializer], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


@schedule_openapi.schedule_list_schema
class ScheduleListView(APIView):
    roles = {"GET": Role.ADMIN, "POST": Role.ADMIN}

    def get(self, request: Request) -> Response:
        return Response({"results": [outputs.schedule(s) for s in Schedule.objects.select_related("queue")]})

    def post(self, request: Request) -> Response:
        schedule = create_schedule(_validated(ScheduleCreateSerializer, request.data))
        audit.record("schedule.created", audit.api_actor(request), f"schedule {schedule.name!r} created")
        return Response(outputs.schedule(schedule), status=201)


@schedule_openapi.schedule_detail_schema
class ScheduleDetailView(APIView):
    roles = {"GET": Role.ADMIN, "PATCH": Role.ADMIN, "DELETE": Role.ADMIN}

    def get(self, request: Request, name: str) -> Response:
        return Response(outputs.schedule(schedule_or_404(name)))

    def patch(self, request: Request, name: str) -> Response:
        schedule_or_404(name)  # an unknown schedule is a 404 before the body is judged
        schedule = update_schedule(name, _validated(ScheduleUpdateSerializer, request.data))
        return Response(outputs.schedule(schedule))

    def delete(self, request: Request, name: str) -> Response:
        delete_schedule(name)
        audit.record("schedule.deleted", audit.api_actor(request), f"schedule {name!r} deleted")
        return Response(status=204)


@schedule_openapi.schedule_trigger_schema
class ScheduleTriggerView(APIView):
    roles = {"POST": Role.ADMIN}

    def post(self, request: Request, name: str) -> Response:
        schedule = schedule_or_404(name)
        _validated(ScheduleTriggerSerializer, request.data)
        row = firing.trigger(schedule)
        audit.record("schedule.triggered", audit.api_actor(request), f"schedule {name!r} triggered", task_id=row["id"])
        return Response(outputs.task(row, schedule.queue.name), status=201)
