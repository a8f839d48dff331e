"""URLs of workers.longpoll.LongPoll's attempts: only LongPoll routes requests here."""

from __future__ import annotations

from django.urls import re_path

from workers.views import ClaimView

urlpatterns = [
    re_path(r"^workers/claim/?$", ClaimView.as_attempt_view(), name="worker-claim"),
]
