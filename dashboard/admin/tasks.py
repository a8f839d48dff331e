"""The task inspector: a read-only view of tf_task that stays fast with millions of rows.

* Counting: ``EstimatedCountPaginator`` (no ``COUNT(*)`` over the table per
  page view), ``show_full_result_count = False``, facets off.
* Filters map to indexed conditions: queue and status (``tf_task_queue_status``,
  ``tf_task_listing``), worker id and time ranges as exact/range inputs rather
  than lists of distinct values.
* Search is exact: a task id (primary key), an idempotency key (the
  per-queue unique index, probed once per queue) or a kind (the per-queue
  ``tf_task_kind_listing`` index), never ``LIKE '%...%'``.
* State changes are actions that call ``queues.lifecycle``: cancel (at once
  for pending and retry tasks, on request for claimed and executing ones),
  retry now.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from django.contrib import admin, messages
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from dashboard import confirm
from dashboard.admin.search import payload_containments
from dashboard.filters import KindFilter, TimeRangeFilter, WorkerFilter
from dashboard.paginator import EstimatedCountPaginator
from queues import lifecycle
from queues.errors import InvalidTransition, TaskNotFound
from queues.models import Queue, Status, Task, TaskEvent

PREVIEW_CHARS = 80
JSON_SHOWN_CHARS = 64 * 1024
HEARTBEATS_SHOWN = 20
# Pending and retry tasks are cancelled at once; claimed and executing ones are asked to stop.
CANCELLABLE = (Status.PENDING, Status.RETRY, Status.CLAIMED, Status.EXECUTING)


def pretty_json(value: Any) -> SafeString:
    if value is None:
        return format_html('<span class="tf-muted">{}</span>', "none")
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    note = ""
    if len(text) > JSON_SHOWN_CHARS:
        note = f"\n… {len(text) - JSON_SHOWN_CHARS} more characters not shown"
        text = text[:JSON_SHOWN_CHARS]
    return format_html('<pre class="tf-json">{}{}</pre>', text, note)


def preview(value: Any) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else value
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = (
        "short_id",
        "queue",
        "kind",
        "status",
        "priority",
        "attempts",
        "claimed_by",
        "scheduled_at",
        "created_at",
        "payload_preview",
    )
    list_filter = (
        "queue",
        "status",
        ("kind", KindFilter),
        ("claimed_by", WorkerFilter),
        ("created_at", TimeRangeFilter),
        ("scheduled_at", TimeRangeFilter),
    )
    list_select_related = ("queue",)
    list_per_page = 50
    ordering = ("-created_at", "-id")
    search_fields = ("id",)  # shows the search box; get_search_results does exact lookups only
    search_help_text = "Exact task id, idempotency key or kind, or key=value in the payload (user.id=42 goes deeper)."
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    raw_id_fields = ("queue",)
    actions = ("cancel_tasks", "retry_tasks_now")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "queue_link",
                    "status",
                    "kind",
                    "priority",
                    "idempotency_key",
                    ("created_at", "scheduled_at"),
                    ("status_changed_at", "finished_at"),
                )
            },
        ),
        (
            "Attempts and lease",
            {"fields": (("attempts", "max_retries"), "time_limit", "claimed_by", "lease", "last_error_text")},
        ),
        ("Payload, progress and result", {"fields": ("payload_json", "progress_json", "result_json")}),
        ("History", {"fields": ("transitions", "heartbeats")}),
    )
    readonly_fields = (
        "id",
        "queue_link",
        "status",
        "kind",
        "priority",
        "idempotency_key",
        "created_at",
        "scheduled_at",
        "status_changed_at",
        "finished_at",
        "attempts",
        "max_retries",
        "time_limit",
        "claimed_by",
        "lease",
        "last_error_text",
        "payload_json",
        "progress_json",
        "result_json",
        "transitions",
        "heartbeats",
    )

    # --- read-only: tasks change state only through the actions below ---------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Who may cancel or retry: the model's change permission (the form itself stays read-only)."""
        return request.user.has_perm("queues.change_task")

    # --- search: exact matches through indexes ---------------------------------------

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Task], search_term: str
    ) -> tuple[QuerySet[Task], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        matches: list[uuid.UUID] = []
        try:
            matches += Task.objects.filter(pk=uuid.UUID(term)).values_list("pk", flat=True)
        except ValueError:
            pass
        # The unique index is (queue_id, idempotency_key): one probe per queue.
        queue_ids = list(Queue.objects.values_list("pk", flat=True))
        matches += Task.objects.filter(queue_id__in=queue_ids, idempotency_key=term).values_list("pk", flat=True)
        # A kind may name many tasks: a condition (served per queue by tf_task_kind_listing), not a list of ids.
        found = Q(pk__in=matches) | Q(queue_id__in=queue_ids, kind=term)
        for containment in payload_containments(term):  # key=value: served by tf_task_payload
            found |= Q(payload__contains=containment)
        return queryset.filter(found), False

    # --- list columns -----------------------------------------------------------------

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: Task) -> str:
        return str(obj.id)

    @admin.display(description="payload")
    def payload_preview(self, obj: Task) -> str:
        return preview(obj.payload)

    # --- detail page ------------------------------------------------------------------

    @admin.display(description="queue")
    def queue_link(self, obj: Task) -> str:
        url = reverse("admin:queues_queue_change", args=[obj.queue_id])
        return format_html('<a href="{}">{}</a>', url, obj.queue.name)

    @admin.display(description="lease")
    def lease(self, obj: Task) -> str:
        if obj.status not in (Status.CLAIMED, Status.EXECUTING):
            return "not leased"
        return format_html(
            "claimed at {} · last heartbeat {} · expires at {}{}",
            obj.claimed_at,
            obj.heartbeat_at or "none yet",
            obj.lease_expires_at,
            " · cancel requested: the worker is told to stop" if obj.cancel_requested else "",
        )

    @admin.display(description="time limit")
    def time_limit(self, obj: Task) -> str:
        if obj.timeout_seconds is None:
            return "none"
        return f"{obj.timeout_seconds} s per attempt, counted from its claim"

    @admin.display(description="last error")
    def last_error_text(self, obj: Task) -> str:
        if not obj.last_error:
            return format_html('<span class="tf-muted">{}</span>', "none")
        return format_html('<pre class="tf-error">{}</pre>', obj.last_error)

    @admin.display(description="payload")
    def payload_json(self, obj: Task) -> str:
        return pretty_json(obj.payload)

    @admin.display(description="result")
    def result_json(self, obj: Task) -> str:
        return pretty_json(obj.result)

    @admin.display(description="progress")
    def progress_json(self, obj: Task) -> str:
        """The latest progress a heartbeat sent."""
        return pretty_json(obj.progress)

    @admin.display(description="transitions")
    def transitions(self, obj: Task) -> str:
        events = TaskEvent.objects.filter(task_id=obj.id, kind=TaskEvent.Kind.TRANSITION).order_by("at", "id")
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            ((e.at, e.from_status or "(enqueued)", e.to_status, e.worker_id or "", e.detail or "") for e in events),
        )
        return format_html(
            '<table class="tf-history"><thead><tr><th>at</th><th>from</th><th>to</th><th>worker</th>'
            "<th>detail</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="heartbeats")
    def heartbeats(self, obj: Task) -> str:
        beats = list(
            TaskEvent.objects.filter(task_id=obj.id, kind=TaskEvent.Kind.HEARTBEAT).order_by("-at", "-id")[
                :HEARTBEATS_SHOWN
            ]
        )
        if not beats:
            return format_html('<span class="tf-muted">{}</span>', "no heartbeats")
        rows = format_html_join("", "<tr><td>{}</td><td>{}</td></tr>", ((b.at, b.worker_id or "") for b in beats))
        return format_html(
            '<table class="tf-heartbeats"><caption>last {} heartbeat(s), newest first</caption>'
            "<thead><tr><th>at</th><th>worker</th></tr></thead><tbody>{}</tbody></table>",
            len(beats),
            rows,
        )

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        task = self.get_object(request, object_id)
        extra = {
            "can_operate": self.has_operate_permission(request),
            "can_cancel": task is not None and task.status in CANCELLABLE,
            "can_retry_now": task is not None and task.status == Status.RETRY,
        }
        return super().change_view(request, object_id, form_url, {**extra, **(extra_context or {})})

    # --- actions ----------------------------------------------------------------------

    @admin.action(description="Cancel selected tasks (running ones are asked to stop)", permissions=["operate"])
    def cancel_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> HttpResponse | None:
        tasks = list(queryset.select_related("queue").order_by())
        eligible = [t for t in tasks if t.status in CANCELLABLE]
        if not confirm.is_confirmed(request):
            return confirm.confirmation_page(
                self,
                request,
                title="Cancel tasks",
                question=(
                    f"Cancel {len(eligible)} task(s)? Pending and retry tasks are cancelled at once; claimed and "
                    "executing ones are asked to stop (cancelled when their worker gives up). "
                    "Finished tasks are skipped."
                ),
                warning="Cancelled tasks cannot be brought back.",
                objects=[f"{t.id} ({t.queue.name}, {t.status})" for t in eligible],
                total=len(eligible),
                back_url=request.get_full_path(),
                action="cancel_tasks",
                confirm_label="Yes, cancel them",
            )
        cancelled, asked = _cancel(request, eligible)
        self.message_user(
            request,
            f"Cancelled {len(cancelled)} task(s), asked {len(asked)} running task(s) to stop; "
            f"skipped {len(tasks) - len(cancelled) - len(asked)}.",
            messages.SUCCESS,
        )
        return None

    @admin.action(description="Retry selected retry tasks now", permissions=["operate"])
    def retry_tasks_now(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        tasks = list(queryset.order_by())
        moved = _retry_now(request, [t.id for t in tasks])
        self.message_user(
            request,
            f"{len(moved)} task(s) back to pending now; skipped {len(tasks) - len(moved)} not in retry.",
            messages.SUCCESS,
        )

    # --- the same moves from a task's own page -----------------------------------------

    def get_urls(self) -> list[Any]:
        wrap = self.admin_site.admin_view
        return [
            path("<uuid:task_id>/cancel/", wrap(self.cancel_one), name="queues_task_cancel"),
            path("<uuid:task_id>/retry-now/", wrap(self.retry_one), name="queues_task_retry_now"),
            *super().get_urls(),
        ]

    def cancel_one(self, request: HttpRequest, task_id: uuid.UUID) -> HttpResponse:
        task = get_object_or_404(Task.objects.select_related("queue"), pk=task_id)
        detail = reverse("admin:queues_task_change", args=[task_id])
        if not self.has_operate_permission(request):
            return self._refused(request, detail)
        if not confirm.is_confirmed(request):
            return confirm.confirmation_page(
                self,
                request,
                title="Cancel task",
                question=f"Cancel task {task.id} of {task.queue.name} (now {task.status})?",
                warning="A cancelled task cannot be brought back.",
                objects=[],
                total=0,
                back_url=detail,
                confirm_label="Yes, cancel it",
            )
        cancelled, asked = _cancel(request, [task])
        if cancelled:
            self.message_user(request, "Task cancelled.", messages.SUCCESS)
        elif asked:
            self.message_user(request, "The task is running: its worker is asked to stop.", messages.SUCCESS)
        else:
            self.message_user(request, f"Not cancelled: the task is {_status(task_id)}.", messages.WARNING)
        return HttpResponseRedirect(detail)

    def retry_one(self, request: HttpRequest, task_id: uuid.UUID) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        detail = reverse("admin:queues_task_change", args=[task_id])
        if not self.has_operate_permission(request):
            return self._refused(request, detail)
        if _retry_now(request, [task_id]):
            self.message_user(request, "Task back to pending now.", messages.SUCCESS)
        else:
            self.message_user(request, f"Not retried: the task is {_status(task_id)}.", messages.WARNING)
        return HttpResponseRedirect(detail)

    def _refused(self, request: HttpRequest, back: str) -> HttpResponse:
        self.message_user(request, "You may view tasks but not change them.", messages.ERROR)
        return HttpResponseRedirect(back)


def _cancel(request: HttpRequest, tasks: list[Task]) -> tuple[list[Task], list[Task]]:
    """Cancel each task, at once or by request: (cancelled, asked to stop)."""
    cancelled: list[Task] = []
    asked: list[Task] = []
    for task in tasks:
        try:
            _, at_once = lifecycle.cancel_or_request(task.queue, task.id)
        except (InvalidTransition, TaskNotFound):
            continue  # finished (or gone) since the page was drawn
        (cancelled if at_once else asked).append(task)
    confirm.log_changes(request, cancelled, "Cancelled")
    confirm.log_changes(request, asked, "Cancel requested")
    return cancelled, asked


def _retry_now(request: HttpRequest, task_ids: list[uuid.UUID]) -> list[dict[str, Any]]:
    moved = lifecycle.retry_now(task_ids, actor=confirm.actor(request))
    confirm.log_changes(request, Task.objects.filter(pk__in=[row["id"] for row in moved]), "Retried now")
    return moved


def _status(task_id: uuid.UUID) -> str:
    return Task.objects.filter(pk=task_id).values_list("status", flat=True).first() or "gone"
