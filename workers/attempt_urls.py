"""URLs of workers.longpoll.LongPoll's attempts: only LongPoll routes requests here.

Claims, and reads of one task (which may wait for its result), each run as
plain DRF views that never wait themselves.
"""

from __future__ import annotations

from django.urls import re_path

from queues.api.views import TaskByIdView, TaskDetailView
from workers.views import ClaimView

urlpatterns = [
    re_path(r"^workers/claim/?$", ClaimView.as_attempt_view(), name="worker-claim"),
    re_path(
        r"^queues/(?P<name>[^/]+)/tasks/(?P<task_id>[^/]+)/?$", TaskDetailView.as_attempt_view(), name="task-detail"
    ),
    re_path(r"^tasks/(?P<task_id>[^/]+)/?$", TaskByIdView.as_attempt_view(), name="task-by-id"),
]
