"""Behind a trusted reverse proxy the login throttle keys on the real client, never on the proxy."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from taskforge.ops import login_throttle

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"
PROXY = "10.1.2.3"


@pytest.fixture(autouse=True)
def behind_a_proxy(settings):  # type: ignore[no-untyped-def]
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.TASKFORGE_TRUSTED_PROXIES = ["10.0.0.0/8"]
    get_user_model().objects.create_superuser("admin", "admin@example.com", PASSWORD)


def _login(password: str, remote: str, forwarded: str | None = None) -> bool:
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {}
    client = Client(REMOTE_ADDR=remote, **extra)
    client.post("/admin/login/?next=/admin/", {"username": "admin", "password": password})
    return "_auth_user_id" in client.session


def test_an_attacker_behind_the_proxy_cannot_lock_the_admin_out_for_everyone() -> None:
    for _ in range(login_throttle.MAX_FAILURES):
        assert not _login("wrong", PROXY, "203.0.113.9")
    assert not _login(PASSWORD, PROXY, "203.0.113.9"), "the attacker's own address is locked"
    assert _login(PASSWORD, PROXY, "198.51.100.7"), "the operator, through the same proxy, is not"


def test_a_forged_left_part_of_x_forwarded_for_does_not_dodge_the_throttle() -> None:
    # The client sends its own X-Forwarded-For; the proxy appends the real address on the right.
    for n in range(login_throttle.MAX_FAILURES):
        assert not _login("wrong", PROXY, f"192.0.2.{n}, 203.0.113.9")
    assert not _login(PASSWORD, PROXY, "192.0.2.99, 203.0.113.9")


def test_a_client_not_behind_a_trusted_proxy_cannot_choose_its_address() -> None:
    for n in range(login_throttle.MAX_FAILURES):
        assert not _login("wrong", "203.0.113.50", f"198.51.100.{n}")
    assert not _login(PASSWORD, "203.0.113.50", "198.51.100.200"), "its X-Forwarded-For is ignored"
    assert _login(PASSWORD, "203.0.113.51")
