"""A lost database connection is a 503 the client may retry, never a 500."""

from __future__ import annotations

import httpx
import pytest
from django import db
from django.conf import settings
from django.db import connection

from queues.apikeys import create_key
from taskforge.http.errors import exception_handler


@pytest.mark.parametrize("error", [db.OperationalError, db.InterfaceError])
def test_database_errors_are_503_unavailable_with_retry_after(error):
    response = exception_handler(error("terminating connection due to administrator command"), {})
    assert response.status_code == 503
    assert response.data["error"]["code"] == "unavailable"
    assert response["Retry-After"] == "1"
    assert "administrator" not in str(response.data)  # no internals leak


def test_connections_are_health_checked_so_a_killed_backend_is_replaced():
    # With the pool, CONN_HEALTH_CHECKS makes psycopg_pool check every checkout.
    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_api_process_survives_pg_terminate_backend_of_its_pooled_connections(live_stack):
    """Every connection an API process holds is killed: its next requests still answer 200."""
    _, key = create_key("pgkill", "admin")
    url = live_stack.start_api(workers=1, extra_env={"TASKFORGE_DB_POOL_SIZE": "3"})
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
        for _ in range(5):
            assert http.get("/queues").status_code == 200
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (own_pid,) = cursor.fetchone()
            cursor.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> %s",
                [own_pid],
            )
            (killed,) = cursor.fetchone()
        assert killed >= 1
        statuses = [http.get("/queues").status_code for _ in range(5)]
    assert statuses == [200] * 5
