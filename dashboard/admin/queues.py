"""Queues: create and edit settings; pause, resume and purge as confirmed actions."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html

from dashboard import confirm
from queues import lifecycle
from queues.dispatch import announce
from queues.models import Queue

# Shown, not edited: push targets are validated and their secrets answered by the API.
PUSH_FIELDS = ("push_target", "push_secret_state")


class QueueForm(forms.ModelForm):
    class Meta:
        model = Queue
        fields = (
            "name",
            "max_retries",
            "rate_limit",
            "rate_burst",
            "paused",
            "retry_base_ms",
            "retry_max_delay_ms",
            "timeout_seconds",
        )

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data  # what ModelForm.clean() returns (typed as optional by Form's)
        base, max_delay = cleaned.get("retry_base_ms"), cleaned.get("retry_max_delay_ms")
        if base is not None and max_delay is not None and max_delay < base:
            self.add_error("retry_max_delay_ms", "Must be greater than or equal to the retry base delay.")
        return cleaned


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    form = QueueForm
    list_display = (
        "name",
        "paused",
        "rate_limit",
        "burst",
        "max_retries",
        "retry_base_ms",
        "retry_max_delay_ms",
        "delivery",
        "links",
    )
    list_filter = ("paused",)
    search_fields = ("name",)
    ordering = ("name",)
    actions = ("pause_queues", "resume_queues", "purge_queues")
    fieldsets = (
        (None, {"fields": ("name", "paused")}),
        ("Rate limit", {"fields": ("rate_limit", "rate_burst")}),
        ("Retries", {"fields": ("max_retries", "retry_base_ms", "retry_max_delay_ms")}),
        ("Time limit", {"fields": ("timeout_seconds",)}),
        # Set through the API (PATCH /queues/{name}): its secret is answered once, to the caller.
        ("Push delivery", {"fields": ("push_target", "push_secret_state")}),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Queue | None = None) -> tuple[str, ...]:
        # Tasks, metrics and Redis keys are named after the queue: a name never changes.
        return ("name", *PUSH_FIELDS) if obj is not None else PUSH_FIELDS

    @admin.display(description="delivery")
    def delivery(self, obj: Queue) -> str:
        return "push" if obj.push is not None else "pull"

    @admin.display(description="push target")
    def push_target(self, obj: Queue) -> str:
        if obj.push is None:
            return "none: workers pull this queue's tasks (set push with PATCH /queues/{name})"
        push = obj.push
        headers = ", ".join(sorted(push.get("headers") or {})) or "none"
        return format_html(
            "POST {}<br>timeout {} s, at most {} in flight, extra headers: {}",
            push["url"],
            push["timeout_seconds"],
            push["max_concurrent"],
            headers,
        )

    @admin.display(description="push secret")
    def push_secret_state(self, obj: Queue) -> str:
        if obj.push is None:
            return "none"
        if obj.push_secret_rotated_at is None:
            return "set (rotate with POST /queues/{name}/push-secret)"
        return f"rotated at {obj.push_secret_rotated_at:%Y-%m-%d %H:%M:%S} UTC"

    # Deleting a queue with tasks must go through lifecycle.delete_queue (API: DELETE /queues/{name}).
    def has_delete_permission(self, request: HttpRequest, obj: Queue | None = None) -> bool:
        return False

    @admin.display(description="burst")
    def burst(self, obj: Queue) -> int | None:
        return obj.effective_burst

    @admin.display(description="")
    def links(self, obj: Queue) -> str:
        tasks = reverse("admin:queues_task_changelist")
        dlq = reverse("admin:queues_deadlettertask_changelist")
        return format_html(
            '<a href="{}?queue__id__exact={}">tasks</a> · <a href="{}?queue__id__exact={}">dead letters</a>',
            tasks,
            obj.pk,
            dlq,
            obj.pk,
        )

    def save_model(self, request: HttpRequest, obj: Queue, form: forms.ModelForm, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if change and "paused" in form.changed_data and not obj.paused:
            _wake_claimers(obj)

    @admin.action(description="Pause selected queues", permissions=["change"])
    def pause_queues(self, request: HttpRequest, queryset: QuerySet[Queue]) -> HttpResponse | None:
        return self._set_paused(request, queryset, paused=True)

    @admin.action(description="Resume selected queues", permissions=["change"])
    def resume_queues(self, request: HttpRequest, queryset: QuerySet[Queue]) -> HttpResponse | None:
        return self._set_paused(request, queryset, paused=False)

    def _set_paused(self, request: HttpRequest, queryset: QuerySet[Queue], *, paused: bool) -> HttpResponse | None:
        verb = "Pause" if paused else "Resume"
        queues = list(queryset.order_by("name"))
        if not confirm.is_confirmed(request):
            return confirm.confirmation_page(
                self,
                request,
                title=f"{verb} queues",
                question=(
                    f"{verb} these queues? "
                    + ("Workers stop receiving their tasks." if paused else "Workers receive their tasks again.")
                ),
                objects=[q.name for q in queues],
                total=len(queues),
                back_url=request.get_full_path(),
                action=f"{verb.lower()}_queues",
            )
        changing = [q for q in queues if q.paused != paused]
        for queue in changing:
            queue.paused = paused
            queue.save(update_fields=["paused", "updated_at"])
            if not paused:
                _wake_claimers(queue)
        confirm.log_changes(request, changing, "Paused" if paused else "Resumed")
        self.message_user(
            request,
            f"{verb}d {len(changing)} queue(s); {len(queues) - len(changing)} already {verb.lower()}d.",
            messages.SUCCESS,
        )
        return None

    @admin.action(description="Purge selected queues (cancel every pending and retry task)", permissions=["change"])
    def purge_queues(self, request: HttpRequest, queryset: QuerySet[Queue]) -> HttpResponse | None:
        queues = list(queryset.order_by("name"))
        if not confirm.is_confirmed(request):
            return confirm.confirmation_page(
                self,
                request,
                title="Purge queues",
                question="Cancel every pending and retry task of these queues? Running tasks are not touched.",
                warning="Cancelled tasks cannot be brought back.",
                objects=[q.name for q in queues],
                total=len(queues),
                back_url=request.get_full_path(),
                action="purge_queues",
                confirm_label="Yes, purge",
            )
        total = 0
        for queue in queues:
            purged = lifecycle.purge(queue)
            total += purged
            confirm.log_changes(request, [queue], f"Purged: {purged} pending/retry task(s) cancelled")
        self.message_user(request, f"Purged {len(queues)} queue(s): {total} task(s) cancelled.", messages.SUCCESS)
        return None


def _wake_claimers(queue: Queue) -> None:
    """A resumed queue's ready tasks are claimable again: ring the long-poll doorbell."""
    transaction.on_commit(lambda: announce.announce(queue, []))
