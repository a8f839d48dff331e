"""Periodic schedules: their next five fire times; create and edit; pause, resume and trigger.

Fire times and ``next_run_at`` come from ``queues.schedules`` (the same
functions the API and the loop use); a trigger enqueues through
``queues.lifecycle`` as ``POST /schedules/{name}/trigger`` does.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from dashboard import confirm
from queues.models import Schedule
from queues.schedules import firing, planning, timing

UPCOMING = 5
PLANNING_FIELDS = ("cron", "every_seconds", "timezone", "paused")


class ScheduleForm(forms.ModelForm):
    class Meta:
        model = Schedule
        fields = (
            "name",
            "queue",
            "cron",
            "every_seconds",
            "timezone",
            "payload",
            "kind",
            "priority",
            "paused",
            "catch_up",
        )
        help_texts = {
            "cron": "5 fields (minute hour day month weekday), or 6 with seconds first. Leave empty with an interval.",
            "every_seconds": "Fire every N seconds (1-86400), the first time N seconds from now. Empty with cron.",
            "timezone": "IANA name (UTC, Europe/Berlin, ...): the zone the cron expression is read in.",
        }

    def clean_cron(self) -> str | None:
        value = (self.cleaned_data.get("cron") or "").strip()
        if not value:
            return None
        try:
            return timing.check_cron(value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_timezone(self) -> str:
        value = self.cleaned_data.get("timezone") or ""
        try:
            timing.check_timezone(value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return value

    def clean_payload(self) -> Any:
        payload = self.cleaned_data.get("payload")
        if not isinstance(payload, dict):
            raise forms.ValidationError("The payload is a JSON object.")
        return payload

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data  # what ModelForm.clean() returns (typed as optional by Form's)
        has_cron = cleaned.get("cron") is not None
        has_every = cleaned.get("every_seconds") is not None
        if has_cron == has_every and "cron" not in self.errors and "every_seconds" not in self.errors:
            self.add_error(None, "Give exactly one of a cron expression and an interval (every_seconds).")
        return cleaned


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = (
        "name",
        "queue",
        "when",
        "timezone",
        "paused",
        "catch_up",
        "next_fire_times",
        "last_run_at",
        "last_task",
    )
    list_filter = ("paused", "queue")
    list_select_related = ("queue",)
    search_fields = ("name", "kind")
    ordering = ("name",)
    actions = ("pause_schedules", "resume_schedules", "trigger_schedules")
    readonly_fields = ("next_fire_times", "last_run_at", "last_task", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "queue", "paused")}),
        ("When", {"fields": ("cron", "every_seconds", "timezone", "catch_up", "next_fire_times")}),
        ("Each task", {"fields": ("payload", "kind", "priority")}),
        ("Runs", {"fields": ("last_run_at", "last_task", "created_at", "updated_at")}),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> tuple[str, ...]:
        # Fired tasks' idempotency keys name the schedule: a name never changes.
        return (*self.readonly_fields, "name") if obj is not None else tuple(self.readonly_fields)

    # --- columns -------------------------------------------------------------------------

    @admin.display(description="when")
    def when(self, obj: Schedule) -> str:
        return obj.cron if obj.cron is not None else f"every {obj.every_seconds} s"

    @admin.display(description=f"next {UPCOMING} fire times")
    def next_fire_times(self, obj: Schedule) -> str:
        if obj._state.adding:  # the add form (its id is already drawn)
            return "-"
        try:
            fires = planning.upcoming_fires(obj, UPCOMING)
        except ValueError as exc:
            return f"cannot be computed: {exc}"
        zone = timing.check_timezone(obj.timezone)
        rows = format_html_join(
            "", "<li><time datetime='{}'>{}</time></li>", ((f.isoformat(), _local(f, zone)) for f in fires)
        )
        note = format_html("<em>{}</em>", "paused: times if resumed now") if obj.paused else ""
        return format_html('{}<ol class="fire-times">{}</ol>', note, rows)

    @admin.display(description="last task")
    def last_task(self, obj: Schedule) -> str:
        if obj.last_task_id is None:
            return "-"
        url = reverse("admin:queues_task_change", args=[obj.last_task_id])
        return format_html('<a href="{}">{}</a>', url, obj.last_task_id)

    # --- saving --------------------------------------------------------------------------

    def save_model(self, request: HttpRequest, obj: Schedule, form: forms.ModelForm, change: bool) -> None:
        replan = not change or any(name in form.changed_data for name in PLANNING_FIELDS)
        with transaction.atomic():
            if replan:
                obj.next_run_at = planning.planned_next_run(obj)
            if not change:
                obj.save()
                return
            # Only what the form changed: the loop may have advanced next_run_at and
            # last_run_at since this form was loaded, and a whole-row save would put them back.
            obj.save(update_fields=[*form.changed_data, "updated_at", *(["next_run_at"] if replan else [])])

    # --- actions -------------------------------------------------------------------------

    @admin.action(description="Pause selected schedules", permissions=["change"])
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> HttpResponse | None:
        return self._set_paused(request, queryset, paused=True)

    @admin.action(description="Resume selected schedules", permissions=["change"])
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> HttpResponse | None:
        return self._set_paused(request, queryset, paused=False)

    def _set_paused(self, request: HttpRequest, queryset: QuerySet[Schedule], *, paused: bool) -> HttpResponse | None:
        verb = "Pause" if paused else "Resume"
        schedules = list(queryset.order_by("name"))
        if not confirm.is_confirmed(request):
            return confirm.confirmation_page(
                self,
                request,
                title=f"{verb} schedules",
                question=(
                    f"{verb} these schedules? "
                    + ("They stop firing." if paused else "They fire again from now on (no catch-up for the pause).")
                ),
                objects=[s.name for s in schedules],
                total=len(schedules),
                back_url=request.get_full_path(),
                action=f"{verb.lower()}_schedules",
            )
        changed = planning.set_paused([s.pk for s in schedules], paused=paused)
        confirm.log_changes(request, changed, "Paused" if paused else "Resumed")
        self.message_user(
            request,
            f"{verb}d {len(changed)} schedule(s); {len(schedules) - len(changed)} already {verb.lower()}d.",
            messages.SUCCESS,
        )
        return None

    @admin.action(description="Trigger selected schedules (one task each, now)", permissions=["change"])
    def trigger_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> HttpResponse | None:
        schedules = list(queryset.select_related("queue").order_by("name"))
        if not confirm.is_confirmed(request):
            return confirm.confirmation_page(
                self,
                request,
                title="Trigger schedules",
                question="Enqueue one task of each of these schedules now? Their next fire times do not change.",
                objects=[s.name for s in schedules],
                total=len(schedules),
                back_url=request.get_full_path(),
                action="trigger_schedules",
                confirm_label="Yes, trigger",
            )
        for schedule in schedules:
            row = firing.trigger(schedule)
            confirm.log_changes(request, [schedule], f"Triggered: task {row['id']}")
        self.message_user(request, f"Triggered {len(schedules)} schedule(s): one task each.", messages.SUCCESS)
        return None


def _local(at: datetime, zone: ZoneInfo) -> str:
    """A fire time on the wall clock of the schedule's zone, named by its abbreviation (CET, CEST, UTC)."""
    return at.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")
