"""REDIS_URL as redis+sentinel://: every Redis user reaches the primary the sentinels name."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from queues.dispatch import lanes
from queues.models import Task
from taskforge.infra.redis import redis_client
from tests.integration.api.support import claim, enqueue

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_enqueue_claim_ack_go_through_the_primary_the_sentinels_name(
    sentinel_cluster, sentinel_redis_url, producer, worker, queue
):
    primary = sentinel_cluster.client()

    task = enqueue(producer, "email_jobs")

    # The announce reached the primary: the task id waits in its lane there.
    assert primary.zscore(lanes.ready_key("email_jobs"), task["id"]) is not None
    [claimed] = claim(worker, queue="email_jobs")
    assert claimed["id"] == task["id"]
    # ... and the claim took it from that lane.
    assert primary.zscore(lanes.ready_key("email_jobs"), task["id"]) is None
    acked = worker.post(
        "/workers/ack",
        {"worker_id": "w-1", "task_id": task["id"], "lease_token": claimed["lease_token"]},
        format="json",
    )
    assert acked.status_code == 200, acked.content
    assert Task.objects.get(id=task["id"]).status == "done"


def test_django_cache_and_the_client_share_the_sentinel_url(sentinel_cluster, sentinel_redis_url):
    primary = sentinel_cluster.client()

    cache.set("probe", "here", 60)

    assert cache.get("probe") == "here"
    assert primary.keys("tf:cache:*probe"), "the cache wrote somewhere else than the primary"
    assert redis_client().connection_pool.connection_kwargs["db"] == 0
    assert redis_client().ping()


def test_readyz_reports_redis_through_the_sentinels(sentinel_cluster, sentinel_redis_url, client):
    response = client.get("/readyz")

    assert response.status_code == 200, response.content
