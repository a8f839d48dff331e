"""The on-call engineer's home: the Django admin, branded for TaskForge.

The index is the live queue overview (first drawn from a snapshot, then fed
by ``/dashboard/stream``); the worker status page is an extra admin view, so
both sit behind the admin's staff login like everything else here.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, get_script_prefix, path, reverse

from dashboard import history, overview
from dashboard.stream import TICK_SECONDS
from workers import controls, registry


class TaskForgeAdminSite(admin.AdminSite):
    site_header = "TaskForge"
    site_title = "TaskForge admin"
    index_title = "Queue overview"
    index_template = "admin/dashboard/index.html"
    # The top bar links every dashboard page; the app sidebar would only narrow wide tables.
    enable_nav_sidebar = False

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        context = {
            "overview": overview.shared_snapshot(TICK_SECONDS),
            "history": history.charts(request.GET.get("history", history.DEFAULT_RANGE)),
            "stream_url": f"{get_script_prefix()}dashboard/stream",
            **(extra_context or {}),
        }
        return super().index(request, context)

    def get_urls(self) -> list[URLResolver | URLPattern]:
        return [
            path("workers/", self.admin_view(self.workers_view), name="workers"),
            path(
                "workers/<path:worker_id>/<str:action>/",
                self.admin_view(self.worker_control_view),
                name="worker-control",
            ),
            *super().get_urls(),
        ]

    def workers_view(self, request: HttpRequest) -> TemplateResponse:
        """Workers seen in the last 10 minutes; stale ones (no heartbeat within the timeout) first."""
        workers = registry.active_workers()
        workers.sort(key=lambda w: (not w["stale"], w["worker_id"]))
        for worker in workers:  # only the buttons that change something
            worker["actions"] = {None: ["quiet", "stop"], "quiet": ["stop", "resume"], "stop": ["resume"]}[
                worker["control"]
            ]
        context = {
            **self.each_context(request),
            "title": "Workers",
            "subtitle": None,
            "workers": workers,
            "stale_count": sum(1 for w in workers if w["stale"]),
            "heartbeat_timeout": settings.TASKFORGE_HEARTBEAT_TIMEOUT,
            "listed_minutes": int(registry.LISTED_FOR.total_seconds() // 60),
            "can_control": request.user.has_perm("workers.change_worker"),
        }
        request.current_app = self.name
        return TemplateResponse(request, "admin/dashboard/workers.html", context)

    def worker_control_view(self, request: HttpRequest, worker_id: str, action: str) -> HttpResponse:
        """POST: quiet, stop or resume one worker (as ``POST /workers/{id}/{action}``), back to the list."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if action not in controls.ACTIONS:
            raise Http404(f"no such worker control: {action}")
        if not request.user.has_perm("workers.change_worker"):
            raise PermissionDenied
        try:
            controls.set_control(worker_id, controls.ACTIONS[action], actor=f"user {request.user.get_username()}")
        except controls.WorkerNotFound as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, CONTROL_DONE[action].format(worker_id=worker_id))
        return HttpResponseRedirect(reverse("admin:workers", current_app=self.name))


CONTROL_DONE = {
    "quiet": "Worker {worker_id} is quiet: it claims nothing more and finishes what it holds.",
    "stop": "Worker {worker_id} will stop: it claims nothing more, finishes what it holds, then exits.",
    "resume": "Worker {worker_id} is back to work.",
}
