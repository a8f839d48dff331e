"""URL map. Every API path answers with or without a trailing slash (no redirect)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, include, re_path
from django.views import View
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from queues.api import schedule_views as s
from queues.api import views as q
from taskforge.http.catchall import UnknownPathView
from taskforge.ops import health
from workers import views as w

_NAME = r"(?P<name>[^/]+)"
_ID = r"(?P<task_id>[^/]+)"


def api(pattern: str, view: type[View], name: str) -> URLPattern:
    return re_path(rf"^{pattern}/?$", view.as_view(), name=name)


urlpatterns = [
    api("healthz", health.HealthzView, "healthz"),
    api("readyz", health.ReadyzView, "readyz"),
    api("metrics", health.MetricsView, "metrics"),
    api("api/schema", SpectacularAPIView, "schema"),
    re_path(r"^api/docs/?$", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    api("queues", q.QueueListView, "queue-list"),
    api(f"queues/{_NAME}", q.QueueDetailView, "queue-detail"),
    api(f"queues/{_NAME}/purge", q.QueuePurgeView, "queue-purge"),
    api(f"queues/{_NAME}/push-secret", q.QueuePushSecretView, "queue-push-secret"),
    api(f"queues/{_NAME}/stats", q.QueueStatsView, "queue-stats"),
    api(f"queues/{_NAME}/history", q.QueueHistoryView, "queue-history"),
    api(f"queues/{_NAME}/tasks", q.TaskListView, "task-list"),
    api(f"queues/{_NAME}/tasks/batch", q.TaskBatchView, "task-batch"),
    api(f"queues/{_NAME}/tasks/{_ID}", q.TaskDetailView, "task-detail"),
    api(f"tasks/{_ID}", q.TaskByIdView, "task-by-id"),
    api(f"queues/{_NAME}/dlq", q.DeadLetterListView, "dlq-list"),
    api(f"queues/{_NAME}/dlq/replay", q.DeadLetterBulkReplayView, "dlq-bulk-replay"),
    api(f"queues/{_NAME}/dlq/{_ID}", q.DeadLetterDetailView, "dlq-detail"),
    api(f"queues/{_NAME}/dlq/{_ID}/replay", q.DeadLetterReplayView, "dlq-replay"),
    api("schedules", s.ScheduleListView, "schedule-list"),
    api(f"schedules/{_NAME}", s.ScheduleDetailView, "schedule-detail"),
    api(f"schedules/{_NAME}/trigger", s.ScheduleTriggerView, "schedule-trigger"),
    api("workers", w.WorkerListView, "worker-list"),
    api("workers/claim", w.ClaimView, "worker-claim"),
    api("workers/heartbeat", w.HeartbeatView, "worker-heartbeat"),
    api("workers/ack", w.AckView, "worker-ack"),
    api("workers/ack/batch", w.AckBatchView, "worker-ack-batch"),
    api("workers/nack", w.NackView, "worker-nack"),
    api("workers/nack/batch", w.NackBatchView, "worker-nack-batch"),
    # A worker id may hold a '/' (sent percent-encoded): the action at the end tells the paths apart.
    api(r"workers/(?P<worker_id>.+)/(?P<action>(?:quiet|stop|resume))", w.WorkerControlView, "worker-control"),
    re_path(r"^dashboard/", include("dashboard.urls")),
    re_path(r"^admin/", admin.site.urls),
    # Anything else: authenticate first (401/403 come before 404), then 404.
    re_path(r"^(?!admin/|static/|dashboard/).*$", UnknownPathView.as_view(), name="unknown"),
]

handler400 = "taskforge.http.errors.handler400"
handler403 = "taskforge.http.errors.handler403"
handler404 = "taskforge.http.errors.handler404"
handler500 = "taskforge.http.errors.handler500"
