"""Concurrent scrapes of one API process share one run of the depth queries; a later scrape sees
what was committed before it (``queues.telemetry.depth.shared_queue_depths``).

``/metrics`` is open by default (the contract), so however often it is scraped at once, each
process keeps one depth query running at a time. The depth query is slowed here (it still runs
against the real Postgres) so that the scrapes surely overlap.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from queues.models import Status
from queues.telemetry import depth
from tests.factories import QueueFactory, TaskFactory
from tests.integration.observability.scrape import parse, value

pytestmark = pytest.mark.django_db(transaction=True)

SLOW_SECONDS = 0.5


def _scrape() -> dict:
    try:
        response = Client().get("/metrics")
        assert response.status_code == 200, response.content
        return parse(response.content.decode())
    finally:
        connection.close()


def test_overlapping_scrapes_share_one_depth_query_and_a_later_one_is_fresh(monkeypatch):
    queue = QueueFactory(name="scraped")
    TaskFactory(queue=queue, status=Status.PENDING)
    real_query = depth._query
    active_queries: list[float] = []

    def slowed(sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        if sql is depth._ACTIVE:
            active_queries.append(time.monotonic())
            time.sleep(SLOW_SECONDS)
        return real_query(sql, params)

    monkeypatch.setattr(depth, "_query", slowed)
    with ThreadPoolExecutor(6) as pool:
        scrapes = [pool.submit(_scrape) for _ in range(6)]
        results = [scrape.result(30) for scrape in scrapes]
    assert all(value(samples, "taskforge_queue_depth", queue="scraped", status="pending") == 1 for samples in results)
    # Six at once, one query (two, should a thread start only after the first query ended).
    assert len(active_queries) <= 2, len(active_queries)

    TaskFactory(queue=queue, status=Status.PENDING)
    assert value(_scrape(), "taskforge_queue_depth", queue="scraped", status="pending") == 2
