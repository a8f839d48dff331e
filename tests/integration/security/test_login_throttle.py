"""Admin login: 5 failures per username + address in 5 minutes lock that pair out."""

from __future__ import annotations

import logging
import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from taskforge.infra.redis import redis_client
from taskforge.ops import login_throttle

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True)
def fast_hasher(settings):
    # The throttle does not depend on the hasher; PBKDF2's cost would only slow the suite.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def staff():
    return get_user_model().objects.create_superuser("oncall", "oncall@example.com", PASSWORD)


def _login(username: str, password: str, address: str = "10.0.0.1"):
    client = Client(REMOTE_ADDR=address)
    response = client.post("/admin/login/?next=/admin/", {"username": username, "password": password})
    return client, response


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def _fail(times: int, username: str = "oncall", address: str = "10.0.0.1") -> None:
    for _ in range(times):
        client, response = _login(username, "wrong", address)
        assert response.status_code == 200 and not _logged_in(client)


def test_right_password_logs_in(staff):
    client, response = _login("oncall", PASSWORD)
    assert response.status_code == 302
    assert _logged_in(client)


def test_five_failures_lock_the_username_and_address_with_a_clear_message(staff):
    _fail(login_throttle.MAX_FAILURES)
    client, response = _login("oncall", PASSWORD)
    assert response.status_code == 200
    assert not _logged_in(client)
    assert "Too many failed login attempts" in response.content.decode()
    assert "Try again in 5 minutes" in response.content.decode()


def test_four_failures_do_not_lock(staff):
    _fail(login_throttle.MAX_FAILURES - 1)
    client, _ = _login("oncall", PASSWORD)
    assert _logged_in(client)


def test_the_lock_is_per_username_and_address(staff):
    get_user_model().objects.create_superuser("other", "other@example.com", PASSWORD)
    _fail(login_throttle.MAX_FAILURES, username="oncall", address="10.0.0.1")
    assert _logged_in(_login("oncall", PASSWORD, address="10.0.0.2")[0])
    assert _logged_in(_login("other", PASSWORD, address="10.0.0.1")[0])
    assert not _logged_in(_login("oncall", PASSWORD, address="10.0.0.1")[0])


def test_username_case_does_not_dodge_the_lock(staff):
    _fail(login_throttle.MAX_FAILURES, username="ONCALL")
    assert not _logged_in(_login("oncall", PASSWORD)[0])


def test_the_lock_ends_with_its_window_and_refusals_do_not_extend_it(staff, monkeypatch):
    monkeypatch.setattr(login_throttle, "WINDOW_SECONDS", 2)
    _fail(1)
    # The window began with that failure, a moment before this: timed from here it has surely
    # ended 2.2 s on, however slow the first login of a busy test process was.
    started = time.monotonic()
    _fail(login_throttle.MAX_FAILURES - 1)
    _fail(3)  # refused while locked: the window keeps its end
    assert not _logged_in(_login("oncall", PASSWORD)[0])
    time.sleep(max(0.0, 2.2 - (time.monotonic() - started)))
    assert _logged_in(_login("oncall", PASSWORD)[0])


def test_a_successful_login_resets_the_count(staff):
    _fail(login_throttle.MAX_FAILURES - 1)
    assert _logged_in(_login("oncall", PASSWORD)[0])
    _fail(login_throttle.MAX_FAILURES - 1)
    assert _logged_in(_login("oncall", PASSWORD)[0])


def test_failures_and_refusals_are_logged_without_the_password(staff, caplog):
    caplog.set_level(logging.INFO, logger="taskforge.ops.audit")
    _fail(login_throttle.MAX_FAILURES)
    _login("oncall", PASSWORD)
    events = [getattr(r, "event", None) for r in caplog.records if r.name == "taskforge.ops.audit"]
    assert events.count("login.failed") == login_throttle.MAX_FAILURES
    assert events.count("login.throttled") == 1
    assert all(PASSWORD not in r.getMessage() and "wrong" not in str(r.__dict__) for r in caplog.records)


def test_the_throttle_is_shared_through_redis(staff):
    """Another API process sees the same count: it lives in Redis, not in memory."""
    _fail(login_throttle.MAX_FAILURES)
    assert int(redis_client().get(login_throttle._key("oncall", "10.0.0.1"))) == login_throttle.MAX_FAILURES
    assert login_throttle.seconds_throttled("oncall", "10.0.0.1") > 0
