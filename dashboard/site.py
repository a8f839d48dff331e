"""The on-call engineer's home: the Django admin, branded for TaskForge.

The index is the live queue overview (first drawn from a snapshot, then fed
by ``/dashboard/stream``); the worker status page is an extra admin view, so
both sit behind the admin's staff login like everything else here.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, get_script_prefix, path

from dashboard import overview
from dashboard.stream import TICK_SECONDS
from workers import registry


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
            "stream_url": f"{get_script_prefix()}dashboard/stream",
            **(extra_context or {}),
        }
        return super().index(request, context)

    def get_urls(self) -> list[URLResolver | URLPattern]:
        return [path("workers/", self.admin_view(self.workers_view), name="workers"), *super().get_urls()]

    def workers_view(self, request: HttpRequest) -> TemplateResponse:
        """Workers seen in the last 10 minutes; stale ones (no heartbeat within the timeout) first."""
        workers = registry.active_workers()
        workers.sort(key=lambda w: (not w["stale"], w["worker_id"]))
        context = {
            **self.each_context(request),
            "title": "Workers",
            "subtitle": None,
            "workers": workers,
            "stale_count": sum(1 for w in workers if w["stale"]),
            "heartbeat_timeout": settings.TASKFORGE_HEARTBEAT_TIMEOUT,
            "listed_minutes": int(registry.LISTED_FOR.total_seconds() // 60),
        }
        request.current_app = self.name
        return TemplateResponse(request, "admin/dashboard/workers.html", context)
