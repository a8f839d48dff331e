"""The stream served by the production server: streams, and does not hold up a graceful stop."""

from __future__ import annotations

import signal
import time

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from tests.factories import QueueFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_sigterm_ends_open_streams_instead_of_waiting_for_the_graceful_timeout(live_stack):
    QueueFactory(name="mail")
    user = get_user_model().objects.create_superuser("oncall", "oncall@example.com", None)
    login = Client()
    login.force_login(user)
    cookies = {settings.SESSION_COOKIE_NAME: login.cookies[settings.SESSION_COOKIE_NAME].value}
    # The session's auth hash is signed with SECRET_KEY: the server must share this process's.
    base = live_stack.start_api(extra_env={"DJANGO_SECRET_KEY": settings.SECRET_KEY})
    server = live_stack.processes[-1]

    with httpx.stream("GET", f"{base}/dashboard/stream", cookies=cookies, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        received = b""
        lines = response.iter_bytes()
        while b"event: stats" not in received:
            received += next(lines)
        assert b'"queue":"mail"' in received

        stopping = time.monotonic()
        server.send_signal(signal.SIGTERM)
        for _ in lines:  # the server ends the response instead of leaving it open
            pass
    server.wait(timeout=15)
    # gunicorn's graceful timeout is 10 s: an open stream used to hold the stop that long.
    assert time.monotonic() - stopping < 5, live_stack.output()
