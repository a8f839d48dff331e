"""Per-queue token buckets in Redis, and the rate limit held across several API processes."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import httpx
import pytest
from django.db import transaction

import taskforge.infra.redis
from queues.apikeys import create_key
from queues.dispatch import outage, ratelimit
from queues.models import Task
from taskforge.infra.redis import redis_client
from tests.factories import QueueFactory
from tests.integration.api.support import claim, enqueue
from tests.live import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def after_commit_runs_at_once(monkeypatch):
    """The test's transaction never commits: run after-commit work (the Redis writes) at once."""
    monkeypatch.setattr(transaction, "on_commit", lambda func, using=None, robust=False: func())
    monkeypatch.setattr(outage, "_redis_down_until", 0.0)


# --- the bucket -----------------------------------------------------------------------------


def test_bucket_starts_full_and_grants_what_is_there():
    queue = QueueFactory(name="limited", rate_limit=5, rate_burst=8)
    first = ratelimit.take(queue, 6)
    assert first.tokens == 6
    second = ratelimit.take(queue, 6)
    assert second.tokens == 2  # a batch takes as many tokens as are there
    empty = ratelimit.take(queue, 1)
    assert empty.tokens == 0
    assert 0 < empty.retry_after <= 0.2  # one token every 1/5 s


def test_burst_defaults_to_the_rate():
    queue = QueueFactory(name="limited", rate_limit=3)
    assert ratelimit.take(queue, 100).tokens == 3


def test_bucket_refills_at_the_rate_by_redis_time():
    queue = QueueFactory(name="limited", rate_limit=20, rate_burst=20)
    assert ratelimit.take(queue, 20).tokens == 20
    time.sleep(0.5)
    refilled = ratelimit.take(queue, 100).tokens
    assert 8 <= refilled <= 12  # ~10 tokens in 0.5 s at 20/s


def test_unused_tokens_are_given_back_up_to_capacity():
    queue = QueueFactory(name="limited", rate_limit=1, rate_burst=4)
    assert ratelimit.take(queue, 4).tokens == 4
    ratelimit.give_back(queue, 3)
    assert ratelimit.take(queue, 10).tokens == 3
    ratelimit.give_back(queue, 50)
    assert ratelimit.take(queue, 10).tokens == 4  # never above the bucket size


def test_bucket_key_carries_the_queue_in_a_hash_tag_and_expires_when_full():
    queue = QueueFactory(name="limited", rate_limit=10, rate_burst=10)
    ratelimit.take(queue, 1)
    key = ratelimit.bucket_key("limited")
    assert key == "tf:{limited}:bucket"
    assert 0 < redis_client().pttl(key) <= 1100  # refilled within 0.1 s; the key goes a second later


def test_unlimited_queue_needs_no_token():
    queue = QueueFactory(name="free")
    assert ratelimit.take(queue, 100).tokens == 100
    assert redis_client().keys("tf:*bucket*") == []


def test_redis_down_grants_nothing(settings, monkeypatch):
    queue = QueueFactory(name="limited", rate_limit=100)
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setattr(taskforge.infra.redis, "_client", None)
    grant = ratelimit.take(queue, 5)
    assert grant.tokens == 0 and grant.retry_after is None


# --- claims through the API -------------------------------------------------------------------


def test_claims_dispatch_at_most_the_burst_then_wait_for_tokens(producer, worker):
    QueueFactory(name="limited", rate_limit=2, rate_burst=3)
    for n in range(6):
        enqueue(producer, "limited", payload={"n": n})
    began = time.monotonic()
    assert len(claim(worker, queue="limited", max_tasks=10)) == 3  # the burst
    spent = time.monotonic()

    # A token comes back every 0.5 s after the burst was spent (between began and spent): a claim
    # gets the whole tokens back by its moment, less those taken since. Bounds, not a count, so a
    # slow machine (a Cluster under CI) cannot turn a claim's own duration into a failure.
    def tokens(earliest: float, latest: float, taken: int) -> range:
        return range(max(0, int(2 * (earliest - spent)) - taken), min(3, int(2 * (latest - began)) - taken) + 1)

    asked = time.monotonic()
    second = len(claim(worker, queue="limited", max_tasks=10))
    assert second in tokens(asked, time.monotonic(), 0)
    time.sleep(0.55)  # at least one more token at 2/s
    asked = time.monotonic()
    third = len(claim(worker, queue="limited", max_tasks=10))
    assert third in tokens(asked, time.monotonic(), second)
    assert second + third >= 1


def test_a_claim_that_finds_fewer_tasks_returns_its_tokens(producer, worker):
    queue = QueueFactory(name="limited", rate_limit=1, rate_burst=5)
    enqueue(producer, "limited")
    enqueue(producer, "limited")
    assert len(claim(worker, queue="limited", max_tasks=5)) == 2
    for n in range(3):
        enqueue(producer, "limited", payload={"n": n})
    assert len(claim(worker, queue="limited", max_tasks=5)) == 3  # the 3 unused tokens came back
    assert ratelimit.take(queue, 5).tokens == 0


def test_garbage_in_the_lane_does_not_spend_tokens(producer, worker):
    queue = QueueFactory(name="limited", rate_limit=1, rate_burst=2)
    redis_client().zadd("tf:{limited}:ready", {"garbage": 0, "1e7b6b0e-0000-4000-8000-000000000000": 0})
    real = enqueue(producer, "limited")
    assert [t["id"] for t in claim(worker, queue="limited", max_tasks=2)] == [real["id"]]
    assert ratelimit.take(queue, 5).tokens == 1  # one token spent, one returned


def test_claim_without_queue_respects_each_queues_limit(producer, worker):
    QueueFactory(name="limited", rate_limit=1, rate_burst=2)
    QueueFactory(name="free")
    for n in range(5):
        enqueue(producer, "limited", priority=1, payload={"n": n})
        enqueue(producer, "free", priority=5, payload={"n": n})
    tasks = claim(worker, max_tasks=10)
    assert [t["queue"] for t in tasks] == ["limited"] * 2 + ["free"] * 5
    assert Task.objects.filter(queue__name="limited", status="pending").count() == 3


def test_claim_without_queue_respects_limits_in_the_postgres_fallback(producer, worker):
    QueueFactory(name="limited", rate_limit=1, rate_burst=2)
    QueueFactory(name="free")
    for n in range(4):
        enqueue(producer, "limited", priority=1, payload={"n": n})
        enqueue(producer, "free", priority=5, payload={"n": n})
    redis_client().delete("tf:{limited}:ready", "tf:{free}:ready")  # lanes lost: Postgres only
    tasks = claim(worker, max_tasks=10)
    assert sorted(t["queue"] for t in tasks) == ["free"] * 4 + ["limited"] * 2


# --- several API processes ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_rate_limit_holds_across_three_api_processes(live_stack):
    """3 API servers, 12 greedy workers, rate_limit 10/s for 10 s: claimed_at from Postgres.

    No 1-second window (sliding) may hold more than rate_burst + rate_limit
    claims, and the total must be within 10% of 10 s x 10/s + burst.
    """
    rate, burst, seconds, workers = 10, 10, 10.0, 12
    QueueFactory(name="metered", rate_limit=rate, rate_burst=None)
    _, key = create_key("live-admin", "admin")
    urls = [live_stack.start_api() for _ in range(3)]
    live_stack.start_loop("run_dispatcher")
    headers = {"Authorization": f"Bearer {key}"}
    batch = {"tasks": [{"payload": {"n": n}} for n in range(300)]}
    assert httpx.post(f"{urls[0]}/queues/metered/tasks/batch", json=batch, headers=headers, timeout=30).is_success

    # Workers run until 10 s after the first dispatch (+ a margin): the measured window is
    # the first 10 s from the first claimed_at, however long the servers took to warm up.
    first_claim: list[float] = []
    give_up = time.monotonic() + seconds + 20
    errors: list[str] = []

    def running() -> float:
        end = first_claim[0] + seconds + 0.5 if first_claim else give_up
        return min(end, give_up) - time.monotonic()

    def work(n: int) -> None:
        with httpx.Client(base_url=urls[n % 3], headers=headers, timeout=15) as client:
            while (left := running()) > 0:
                body = {
                    "worker_id": f"w{n}",
                    "queue": "metered",
                    "max_tasks": 5,
                    "wait_seconds": max(1, min(5, int(left))),
                }
                response = client.post("/workers/claim", json=body)
                if response.status_code != 200:
                    errors.append(response.text)
                    return
                tasks = response.json()["tasks"]
                if tasks and not first_claim:
                    first_claim.append(time.monotonic())
                items = [{"task_id": t["id"], "lease_token": t["lease_token"]} for t in tasks]
                if items:
                    client.post("/workers/ack/batch", json={"worker_id": f"w{n}", "items": items})

    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors[:3]

    claimed = sorted(Task.objects.filter(claimed_at__isnull=False).values_list("claimed_at", flat=True))
    start = claimed[0]
    in_run = [at for at in claimed if at < start + timedelta(seconds=seconds)]
    largest_window = max(sum(1 for other in claimed if at <= other < at + timedelta(seconds=1)) for at in claimed)
    expected = seconds * rate + burst
    print(
        f"\nrate limit {rate}/s burst {burst}: {len(in_run)} dispatched in {seconds:.0f} s "
        f"(expected {expected:.0f}), largest 1 s window {largest_window}"
    )
    assert largest_window <= burst + rate
    assert abs(len(in_run) - expected) <= 0.1 * expected
