"""Stats and the dashboard count finished tasks exactly only up to a cap; beyond it the shared count answers.

A table holding millions of done/cancelled rows must not make every stats call
or dashboard tick a full count of them.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from queues.models import Status
from queues.telemetry import stats
from queues.telemetry.depth import FINISHED_CACHE_KEY
from taskforge.infra.redis import redis_client
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def small_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats, "FINISHED_EXACT_UP_TO", 3)
    redis_client().delete(FINISHED_CACHE_KEY)


def _depth(client, name: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    response = client.get(f"/queues/{name}/stats")
    assert response.status_code == 200, response.content
    return response.json()["depth"]


def test_finished_counts_below_the_cap_are_exact_on_every_call(producer) -> None:  # type: ignore[no-untyped-def]
    queue = QueueFactory(name="mail")
    TaskFactory.create_batch(2, queue=queue, done=True)
    assert _depth(producer, "mail")["done"] == 2
    TaskFactory(queue=queue, done=True)
    TaskFactory(queue=queue, status=Status.CANCELLED, finished_at=timezone.now())
    assert (_depth(producer, "mail")["done"], _depth(producer, "mail")["cancelled"]) == (3, 1)
    assert redis_client().get(FINISHED_CACHE_KEY) is None, "no full count was needed"


def test_beyond_the_cap_the_shared_periodic_count_answers_not_a_full_count_per_call(producer) -> None:  # type: ignore[no-untyped-def]
    queue = QueueFactory(name="mail")
    TaskFactory.create_batch(5, queue=queue, done=True)
    assert _depth(producer, "mail")["done"] == 5  # the first call counts and shares the count
    assert redis_client().ttl(FINISHED_CACHE_KEY) > 0
    TaskFactory.create_batch(2, queue=queue, done=True)
    TaskFactory(queue=queue)
    depth = _depth(producer, "mail")
    assert depth["done"] == 5, "served from the shared count until it is refreshed"
    assert depth["pending"] == 1, "active states stay exact"
    redis_client().delete(FINISHED_CACHE_KEY)  # what its expiry does
    assert _depth(producer, "mail")["done"] == 7


def test_the_dashboard_snapshot_uses_the_same_bounded_counts(producer) -> None:  # type: ignore[no-untyped-def]
    from dashboard.overview import snapshot

    queue = QueueFactory(name="mail")
    TaskFactory.create_batch(5, queue=queue, done=True)
    [row] = snapshot()["queues"]
    assert row["depth"]["done"] == 5
    TaskFactory.create_batch(2, queue=queue, done=True)
    [row] = snapshot()["queues"]
    assert row["depth"]["done"] == 5
