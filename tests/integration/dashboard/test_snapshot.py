"""overview.shared_snapshot: one stats computation per tick for every server process."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard import overview
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db


def test_the_snapshot_is_computed_once_per_tick_across_processes():
    """Two server processes asking within one tick share one computation (through Redis)."""
    QueueFactory(name="one")
    with CaptureQueriesContext(connection) as first_queries:
        first = overview.shared_snapshot(5.0)
    with CaptureQueriesContext(connection) as second_queries:
        second = overview.shared_snapshot(5.0)

    assert len(first_queries) >= 2  # queues + stats
    assert len(second_queries) == 0
    assert second == first


def test_a_new_tick_computes_again():
    queue = QueueFactory(name="one")
    first = overview.shared_snapshot(0.05)
    TaskFactory(queue=queue)
    import time

    time.sleep(0.1)
    second = overview.shared_snapshot(0.05)
    assert second["at"] != first["at"]
    assert second["queues"][0]["depth"]["pending"] == first["queues"][0]["depth"]["pending"] + 1


def test_while_another_process_computes_the_last_published_snapshot_is_served():
    from taskforge.infra.redis import redis_client

    QueueFactory(name="one")
    published = overview.shared_snapshot(0.01)
    redis_client().set(overview.LOCK_KEY, b"1", ex=5)  # someone else is computing
    redis_client().delete(overview.FRESH_KEY)
    with CaptureQueriesContext(connection) as queries:
        served = overview.shared_snapshot(1.0)
    assert served == published
    assert len(queries) == 0
