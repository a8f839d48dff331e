"""REDIS_URL as redis+cluster://: each key on the node its slot names, the doorbell on sharded pub/sub,
Django's cache across slots, readiness of every primary, and a Cluster out of reach."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache
from redis.exceptions import CrossSlotTransactionError

import taskforge.infra.redis
from queues.dispatch import doorbell, lanes, outage, ratelimit
from queues.models import Task
from queues.telemetry import counters
from taskforge.infra import rowcache
from taskforge.infra.redis import ClusterUnavailable, redis_client
from tests.factories import QueueFactory
from tests.integration.api.support import claim, enqueue
from tests.integration.workers.test_long_poll import Poll, waiting
from tests.live import free_port

pytestmark = [pytest.mark.xdist_group("redis_cluster")]


@pytest.mark.django_db(transaction=True)
def test_a_queues_keys_live_on_the_primary_of_its_slot(redis_cluster, producer, worker):
    QueueFactory(name="limited", rate_limit=5)
    primary = redis_cluster.node(redis_cluster.primary_for(lanes.ready_key("limited")))

    task = enqueue(producer, "limited")

    # The announce reached the node serving the queue's slot, and so did the claim's token.
    assert primary.zscore(lanes.ready_key("limited"), task["id"]) is not None
    [claimed] = claim(worker, queue="limited")
    assert claimed["id"] == task["id"]
    assert primary.zscore(lanes.ready_key("limited"), task["id"]) is None
    assert primary.exists(ratelimit.bucket_key("limited"))
    # The counters' MULTI ran on their own slot's primary.
    counters.flush()
    metrics = redis_cluster.node(redis_cluster.primary_for(counters.ENQUEUED_KEY))
    assert metrics.hget(counters.ENQUEUED_KEY, "limited") == b"1"


@pytest.mark.django_db(transaction=True)
def test_a_waiting_claim_listens_on_the_doorbells_shard_and_wakes_at_once(redis_cluster, make_key, producer, queue):
    channel = doorbell.channel()
    shard = redis_cluster.node(redis_cluster.primary_for(channel))
    poll = waiting(Poll(make_key("worker"), queue="email_jobs", wait_seconds=20))

    # Sharded pub/sub on the channel's shard; no classic subscription on any node.
    assert shard.pubsub_shardnumsub(channel)[0][1] >= 1
    assert all(redis_cluster.node(port).pubsub_numsub(channel)[0][1] == 0 for port in redis_cluster.live_ports())
    task = enqueue(producer)
    answered = time.monotonic()

    assert [t["id"] for t in poll.tasks()] == [task["id"]]
    # Woken by its bell: well before even the shorter re-check timer of a hub that lost its subscription.
    # Timed from the enqueue's answer, not its start: on a loaded machine the test client alone has
    # taken half a second to hand the request to its view.
    assert time.monotonic() - answered < doorbell.DISCONNECTED_RECHECK_SECONDS / 2


def test_djangos_cache_spans_slots(redis_cluster):
    values = {f"key-{n}": n for n in range(20)}
    nodes = {redis_cluster.primary_for(cache.make_key(name)) for name in values}
    assert len(nodes) == 3, "the keys should spread over every primary"

    cache.set_many(values, 60)

    assert cache.get_many(list(values)) == values
    assert len(cache.keys("key-*")) == len(values)  # found on every primary, not only on one
    cache.delete_many(["key-0", "key-1"])
    assert cache.get("key-0") is None and cache.get("key-2") == 2
    cache.delete_pattern("key-1*")
    assert cache.get_many(list(values)).keys() == set(values) - {"key-0", "key-1"} - {f"key-1{n}" for n in range(10)}
    cache.clear()
    assert cache.get_many(list(values)) == {}


@pytest.mark.django_db
def test_readyz_asks_every_primary(redis_cluster, client):
    assert client.get("/readyz").status_code == 200
    evicting = redis_cluster.node(redis_cluster.primaries()[-1])
    evicting.config_set("maxmemory-policy", "allkeys-lru")
    try:
        response = client.get("/readyz")
    finally:
        evicting.config_set("maxmemory-policy", "noeviction")

    assert response.status_code == 503
    assert "maxmemory-policy is allkeys-lru" in response.json()["error"]["message"]


@pytest.mark.django_db
def test_a_cluster_out_of_reach_is_an_outage_postgres_rides_out(settings, monkeypatch, producer, worker, queue, client):
    monkeypatch.setattr(settings, "REDIS_URL", f"redis+cluster://127.0.0.1:{free_port()}")
    monkeypatch.setattr(taskforge.infra.redis, "_client", None)
    monkeypatch.setattr(outage, "_redis_down_until", 0.0)
    rowcache.clear_all()

    with pytest.raises(ClusterUnavailable):
        redis_client()
    task = enqueue(producer)
    [claimed] = claim(worker, queue="email_jobs")
    assert claimed["id"] == task["id"]
    assert Task.objects.get(pk=task["id"]).status == "claimed"
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["checks"]["redis"] == "down"
    QueueFactory(name="limited", rate_limit=5)
    enqueue(producer, "limited")
    assert claim(worker, queue="limited") == []  # rate limits fail closed, as on any Redis outage


def test_a_transaction_over_two_slots_is_refused_as_a_mistake_not_taken_for_an_outage(redis_cluster):
    pipe = redis_client().pipeline(transaction=True)
    pipe.incr("tf:{one}:probe")
    pipe.incr("tf:{other}:probe")

    with pytest.raises(CrossSlotTransactionError):
        pipe.execute()
    # One slot (as the metrics' {metrics} keys share one) is a transaction as on a single Redis.
    pipe = redis_client().pipeline(transaction=True)
    pipe.incr("tf:{one}:probe")
    pipe.incr("tf:{one}:other")
    assert pipe.execute() == [1, 1]
