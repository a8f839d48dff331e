"""The dead-letter browser: filter, then replay or discard one, some, or all matching.

Replays and discards go through ``queues.lifecycle`` (guarded: an entry whose
task is no longer dead is skipped) in batches of at most ``BATCH`` ids, and
each entry actually moved gets a ``LogEntry`` under the acting user.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html

from dashboard import confirm
from dashboard.admin.tasks import preview
from dashboard.filters import DeadLetterStateFilter, TimeRangeFilter
from dashboard.paginator import EstimatedCountPaginator
from queues import lifecycle
from queues.models import DeadLetterTask, Queue, Status

BATCH = 1000  # ids per lifecycle call (replay_many handles at most one batch of given ids)


@admin.register(DeadLetterTask)
class DeadLetterAdmin(admin.ModelAdmin):
    list_display = (
        "task_link",
        "queue",
        "died_at",
        "attempts",
        "replay_count",
        "state",
        "error_preview",
        "payload_preview",
        "row_actions",
    )
    list_filter = (DeadLetterStateFilter, "queue", ("died_at", TimeRangeFilter))
    list_select_related = ("queue", "task")
    list_per_page = 50
    ordering = ("-died_at", "-task_id")
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    raw_id_fields = ("task", "queue")
    actions = ("replay_selected", "discard_selected")
    readonly_fields = ("task_link", "queue", "died_at", "attempts", "replay_count", "replayed_at", "state", "error")
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: DeadLetterTask | None = None) -> bool:
        return False

    # Discarding deletes the task too: only lifecycle.discard_many does that correctly.
    def has_delete_permission(self, request: HttpRequest, obj: DeadLetterTask | None = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("queues.change_deadlettertask")

    # --- columns ---------------------------------------------------------------------

    @admin.display(description="task", ordering="task_id")
    def task_link(self, obj: DeadLetterTask) -> str:
        return format_html('<a href="{}">{}</a>', reverse("admin:queues_task_change", args=[obj.task_id]), obj.task_id)

    @admin.display(description="state")
    def state(self, obj: DeadLetterTask) -> str:
        status = obj.task.status
        return "dead" if status == Status.DEAD else f"replayed (now {status})"

    @admin.display(description="last error")
    def error_preview(self, obj: DeadLetterTask) -> str:
        return preview(obj.last_error or "")

    @admin.display(description="last error")
    def error(self, obj: DeadLetterTask) -> str:
        return format_html('<pre class="tf-error">{}</pre>', obj.last_error or "")

    @admin.display(description="payload")
    def payload_preview(self, obj: DeadLetterTask) -> str:
        return preview(obj.payload)

    @admin.display(description="")
    def row_actions(self, obj: DeadLetterTask) -> str:
        if obj.task.status != Status.DEAD:
            return ""
        return format_html(
            '<a class="tf-row-action" href="{}">replay</a> · <a class="tf-row-action" href="{}">discard</a>',
            reverse("admin:queues_deadlettertask_replay", args=[obj.task_id]),
            reverse("admin:queues_deadlettertask_discard", args=[obj.task_id]),
        )

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return super().changelist_view(
            request, {"can_operate": self.has_operate_permission(request), **(extra_context or {})}
        )

    # --- bulk actions ----------------------------------------------------------------

    @admin.action(description="Replay selected dead tasks", permissions=["operate"])
    def replay_selected(self, request: HttpRequest, queryset: QuerySet[DeadLetterTask]) -> HttpResponse | None:
        if not confirm.is_confirmed(request):
            return self._confirm(request, queryset, "replay", action="replay_selected")
        replayed = replay(request, queryset)
        self.message_user(request, f"Replayed {replayed} task(s) (now pending).", messages.SUCCESS)
        return None

    @admin.action(description="Discard selected dead tasks", permissions=["operate"])
    def discard_selected(self, request: HttpRequest, queryset: QuerySet[DeadLetterTask]) -> HttpResponse | None:
        if not confirm.is_confirmed(request):
            return self._confirm(request, queryset, "discard", action="discard_selected")
        discarded = discard(request, queryset)
        self.message_user(request, f"Discarded {discarded} dead task(s) for good.", messages.SUCCESS)
        return None

    # --- per-row and "all matching" pages ------------------------------------------------

    def get_urls(self) -> list[Any]:
        wrap = self.admin_site.admin_view
        return [
            path("replay-matching/", wrap(self.replay_matching), name="queues_deadlettertask_replay_matching"),
            path("<uuid:task_id>/replay/", wrap(self.replay_one), name="queues_deadlettertask_replay"),
            path("<uuid:task_id>/discard/", wrap(self.discard_one), name="queues_deadlettertask_discard"),
            *super().get_urls(),
        ]

    def replay_one(self, request: HttpRequest, task_id: uuid.UUID) -> HttpResponse:
        return self._one(request, task_id, "replay")

    def discard_one(self, request: HttpRequest, task_id: uuid.UUID) -> HttpResponse:
        return self._one(request, task_id, "discard")

    def _one(self, request: HttpRequest, task_id: uuid.UUID, verb: str) -> HttpResponse:
        get_object_or_404(DeadLetterTask, pk=task_id)
        back = reverse("admin:queues_deadlettertask_changelist")
        if not self.has_operate_permission(request):
            self.message_user(request, "You may view the dead-letter queue but not change it.", messages.ERROR)
            return HttpResponseRedirect(back)
        queryset = DeadLetterTask.objects.filter(pk=task_id)
        if not confirm.is_confirmed(request):
            return self._confirm(request, queryset, verb)
        done = replay(request, queryset) if verb == "replay" else discard(request, queryset)
        if done:
            self.message_user(request, f"{verb.capitalize()}ed task {task_id}.", messages.SUCCESS)
        else:
            self.message_user(request, f"Task {task_id} is no longer dead: nothing to {verb}.", messages.WARNING)
        return HttpResponseRedirect(back)

    def replay_matching(self, request: HttpRequest) -> HttpResponse:
        """Replay every entry the changelist shows with the same filters (all pages)."""
        back = reverse("admin:queues_deadlettertask_changelist") + "?" + request.GET.urlencode()
        if not self.has_operate_permission(request):
            self.message_user(request, "You may view the dead-letter queue but not change it.", messages.ERROR)
            return HttpResponseRedirect(back)
        queryset = self.get_changelist_instance(request).get_queryset(request)
        if not confirm.is_confirmed(request):
            return self._confirm(request, queryset, "replay", back=back, matching=True)
        replayed = replay(request, queryset)
        self.message_user(request, f"Replayed {replayed} task(s) matching the filter.", messages.SUCCESS)
        return HttpResponseRedirect(back)

    def _confirm(
        self,
        request: HttpRequest,
        queryset: QuerySet[DeadLetterTask],
        verb: str,
        *,
        action: str | None = None,
        back: str | None = None,
        matching: bool = False,
    ) -> HttpResponse:
        dead = queryset.filter(task__status=Status.DEAD)
        shown = list(dead.select_related("queue").order_by("-died_at")[: confirm.SHOWN])
        total = dead.order_by().count() if len(shown) >= confirm.SHOWN else len(shown)
        what = "every dead task matching the filter" if matching else "these dead tasks"
        question = (
            f"Replay {what} ({total})? Each goes back to pending with a fresh attempt budget."
            if verb == "replay"
            else f"Discard {what} ({total})? The task and its history are deleted."
        )
        return confirm.confirmation_page(
            self,
            request,
            title=f"{verb.capitalize()} dead tasks",
            question=question,
            warning="Discarded tasks cannot be brought back." if verb == "discard" else None,
            objects=[f"{e.task_id} ({e.queue.name}, died {e.died_at:%Y-%m-%d %H:%M:%S})" for e in shown],
            total=total,
            back_url=back or request.get_full_path(),
            action=action,
            confirm_label=f"Yes, {verb}",
        )


def _batches(queryset: QuerySet[DeadLetterTask]) -> Iterator[tuple[Queue, list[uuid.UUID]]]:
    """The dead entries of ``queryset`` as (queue, ids) batches, walked by primary key.

    Keyset paging (``task_id > last``) rather than OFFSET: replayed entries drop
    out of a "dead now" filter while we walk, which would make offsets skip rows.
    """
    queues = {q.pk: q for q in Queue.objects.all()}
    last: uuid.UUID | None = None
    base = queryset.filter(task__status=Status.DEAD).order_by("task_id")
    while True:
        page = base if last is None else base.filter(task_id__gt=last)
        rows = list(page.values_list("task_id", "queue_id")[:BATCH])
        if not rows:
            return
        last = rows[-1][0]
        by_queue: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
        for task_id, queue_id in rows:
            by_queue[queue_id].append(task_id)
        for queue_id, ids in by_queue.items():
            yield queues[queue_id], ids


def _replay_counts(ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, int]:
    return dict(DeadLetterTask.objects.filter(pk__in=ids).values_list("task_id", "replay_count"))


def replay(request: HttpRequest, queryset: QuerySet[DeadLetterTask]) -> int:
    total = 0
    for queue, ids in _batches(queryset):
        before = _replay_counts(ids)
        total += lifecycle.replay_many(queue, ids, actor=confirm.actor(request), batch=len(ids))
        after = _replay_counts(ids)
        moved = [task_id for task_id, count in after.items() if count > before.get(task_id, count)]
        confirm.log_changes(request, DeadLetterTask.objects.filter(pk__in=moved), "Replayed: task back to pending")
    return total


def discard(request: HttpRequest, queryset: QuerySet[DeadLetterTask]) -> int:
    total = 0
    for queue, ids in _batches(queryset):
        entries = list(DeadLetterTask.objects.filter(pk__in=ids))
        total += lifecycle.discard_many(queue, ids)
        remaining = set(DeadLetterTask.objects.filter(pk__in=ids).values_list("task_id", flat=True))
        confirm.log_deletions(request, [e for e in entries if e.task_id not in remaining], "Discarded for good")
    return total
