"""PATCH /queues/{name}: the shown bucket size, concurrent PATCHes, and a PATCH racing a DELETE.

The races are proven with a second real Postgres connection that holds the
queue row (as a concurrent PATCH or DELETE would) while the request waits.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from django.db import connection, connections

from queues.models import Queue
from tests.factories import QueueFactory


@pytest.mark.django_db
def test_rate_burst_shows_the_bucket_size_in_force(admin_api) -> None:  # type: ignore[no-untyped-def]
    created = admin_api.post("/queues", {"name": "limited", "rate_limit": 7}, format="json").json()
    assert created["rate_burst"] == 7, "null burst means equal to rate_limit"
    assert admin_api.get("/queues/limited").json()["rate_burst"] == 7
    assert admin_api.patch("/queues/limited", {"rate_burst": 20}, format="json").json()["rate_burst"] == 20
    cleared = admin_api.patch("/queues/limited", {"rate_burst": None, "rate_limit": 3}, format="json").json()
    assert cleared["rate_burst"] == 3
    assert Queue.objects.get(name="limited").rate_burst is None, "stored as 'follow rate_limit'"
    unlimited = admin_api.patch("/queues/limited", {"rate_limit": None}, format="json").json()
    assert unlimited["rate_burst"] is None
    [listed] = admin_api.get("/queues").json()["results"]
    assert listed["rate_burst"] is None


def _patch_in_background(client, body: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:  # type: ignore[no-untyped-def]
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["response"] = client.patch("/queues/shared", body, format="json")
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _waiting_for_lock(other: psycopg.Connection) -> bool:
    row = other.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
    ).fetchone()
    return bool(row and row[0])


def _hold_until_waited_on(other: psycopg.Connection, thread: threading.Thread) -> None:
    import time

    deadline = time.monotonic() + 8  # below lock_timeout (10 s)
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as watcher:
        while time.monotonic() < deadline and thread.is_alive() and not _waiting_for_lock(watcher):
            time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_concurrent_patches_of_different_fields_both_take_effect(admin_api) -> None:  # type: ignore[no-untyped-def]
    QueueFactory(name="shared", max_retries=3, paused=False)
    admin_api.get("/queues/shared")  # the process has the row cached, as a busy server would
    with psycopg.connect(**connection.get_connection_params()) as other:
        # Another PATCH in flight: it holds the row and pauses the queue.
        other.execute("SELECT 1 FROM tf_queue WHERE name = 'shared' FOR UPDATE")
        other.execute("UPDATE tf_queue SET paused = true, updated_at = now() WHERE name = 'shared'")
        thread, outcome = _patch_in_background(admin_api, {"max_retries": 9})
        _hold_until_waited_on(other, thread)
        other.commit()
    thread.join(30)
    assert outcome["response"].status_code == 200, outcome["response"].content
    assert outcome["response"].json()["paused"] is True
    stored = Queue.objects.get(name="shared")
    assert (stored.max_retries, stored.paused) == (9, True), "neither update is lost"


@pytest.mark.django_db(transaction=True)
def test_a_patch_that_waited_for_a_delete_is_a_404_and_does_not_recreate_the_queue(admin_api) -> None:  # type: ignore[no-untyped-def]
    QueueFactory(name="shared")
    admin_api.get("/queues/shared")
    with psycopg.connect(**connection.get_connection_params()) as other:
        other.execute("SELECT 1 FROM tf_queue WHERE name = 'shared' FOR UPDATE")
        thread, outcome = _patch_in_background(admin_api, {"paused": True})
        _hold_until_waited_on(other, thread)
        other.execute("DELETE FROM tf_queue WHERE name = 'shared'")
        other.commit()
    thread.join(30)
    assert outcome["response"].status_code == 404, outcome["response"].content
    assert outcome["response"].json()["error"]["code"] == "not_found"
    assert not Queue.objects.filter(name="shared").exists()
