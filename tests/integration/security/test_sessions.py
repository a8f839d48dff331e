"""Admin sessions: Postgres holds them, Redis (Django's cache) only speeds them up."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client, override_settings

from taskforge.infra.redis import redis_client

pytestmark = pytest.mark.django_db


def _logged_in(client: Client) -> bool:
    return client.get("/admin/").status_code == 200


def test_a_session_is_cached_in_redis_under_the_cache_prefix(admin_client: Client) -> None:
    assert _logged_in(admin_client)
    assert redis_client().keys("tf:cache:*")


def test_a_redis_flush_does_not_log_an_admin_out(admin_client: Client) -> None:
    assert _logged_in(admin_client)
    redis_client().flushdb()
    assert _logged_in(admin_client)


def test_with_redis_down_an_admin_is_still_served_from_postgres(admin_client: Client) -> None:
    unreachable = {"default": {**settings.CACHES["default"], "LOCATION": "redis://127.0.0.1:1/0"}}
    with override_settings(CACHES=unreachable):
        assert _logged_in(admin_client)
