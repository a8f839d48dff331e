"""/metrics in one process: counters from Redis, gauges from Postgres, the token, request metrics."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

import taskforge.infra.redis
from queues import lifecycle
from queues.models import Status
from queues.telemetry import counters
from queues.telemetry.depth import FINISHED_CACHE_KEY
from queues.telemetry.stats import queue_stats
from taskforge.infra.redis import redis_client
from tests.factories import QueueFactory, TaskFactory
from tests.integration.observability.scrape import family, parse, value
from tests.live import free_port
from workers import registry

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_outbox(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test starts with no increments left over from another test's Redis trouble.
    monkeypatch.setattr(counters, "_outbox", counters._Outbox())


@pytest.fixture
def run_on_commit(django_capture_on_commit_callbacks):  # type: ignore[no-untyped-def]
    """Run the lifecycle's after-commit reports (logs, metrics) as a real commit would."""

    def run(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args, **kwargs)

    return run


def scrape(**headers: str) -> dict:
    response = Client().get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return parse(response.content.decode())


def _expire_lease(task_id) -> None:  # type: ignore[no-untyped-def]
    # Test set-up: make the lease run out now instead of sleeping through the timeout.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE tf_task SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [task_id])


def test_counters_and_histogram_follow_every_kind_of_finish(run_on_commit) -> None:  # type: ignore[no-untyped-def]
    queue = QueueFactory(name="mail", max_retries=1)
    other = QueueFactory(name="other")
    new = [lifecycle.NewTask(payload={"n": n}) for n in range(5)]
    run_on_commit(lifecycle.enqueue, queue, new)
    run_on_commit(lifecycle.enqueue, other, [lifecycle.NewTask(payload={})])
    claimed = run_on_commit(lifecycle.claim, "w-1", [queue.id], 4)
    assert len(claimed) == 4
    acked, retried, killed, expired = (row["id"] for row in claimed)
    with connection.cursor() as cursor:
        # The test runs in one transaction, where now() stands still: give one attempt a known length.
        cursor.execute("UPDATE tf_task SET claimed_at = now() - interval '2 seconds' WHERE id = %s", [acked])
    run_on_commit(lifecycle.heartbeat, acked, worker_id="w-1")
    run_on_commit(lifecycle.ack, acked, worker_id="w-1")
    run_on_commit(lifecycle.nack, retried, worker_id="w-1", error="flaky")
    run_on_commit(lifecycle.nack, killed, worker_id="w-1", error="bad input", retry=False)
    _expire_lease(expired)
    assert run_on_commit(lifecycle.expire_leases) == 1
    (waiting,) = lifecycle.fetch_rows("SELECT id FROM tf_task WHERE queue_id = %s AND status = 'pending'", [queue.id])
    run_on_commit(lifecycle.cancel, queue, waiting["id"])

    samples = scrape()
    assert value(samples, "taskforge_tasks_enqueued_total", queue="mail") == 5
    assert value(samples, "taskforge_tasks_enqueued_total", queue="other") == 1
    completed = {
        status: value(samples, "taskforge_tasks_completed_total", queue="mail", status=status)
        for status in counters.COMPLETION_STATUSES
    }
    assert completed == {"done": 1, "failed": 1, "dead": 1, "expired": 1, "cancelled": 1}
    assert value(samples, "taskforge_tasks_completed_total", queue="other", status="done") == 0
    # Four finished attempts (ack, nack, nack, expiry); a cancel is not an attempt.
    assert value(samples, "taskforge_task_execution_duration_seconds_count", queue="mail") == 4
    assert value(samples, "taskforge_task_execution_duration_seconds_bucket", queue="mail", le="+Inf") == 4
    assert value(samples, "taskforge_task_execution_duration_seconds_count", queue="other") == 0
    buckets = [
        value(samples, "taskforge_task_execution_duration_seconds_bucket", queue="mail", le=label)
        for label in counters.BUCKET_LABELS
    ]
    assert buckets == sorted(buckets), "buckets are cumulative"
    bucket = dict(zip(counters.BUCKET_LABELS, buckets, strict=True))
    assert (bucket["0.005"], bucket["1.0"], bucket["2.5"]) == (3, 3, 4)
    assert value(samples, "taskforge_task_execution_duration_seconds_sum", queue="mail") == pytest.approx(2.0)


def test_idempotent_replay_is_not_counted_twice(run_on_commit) -> None:  # type: ignore[no-untyped-def]
    queue = QueueFactory(name="mail")
    item = lifecycle.NewTask(payload={"a": 1}, idempotency_key="k", fingerprint="f")
    run_on_commit(lifecycle.enqueue, queue, [item])
    run_on_commit(lifecycle.enqueue, queue, [item])
    assert value(scrape(), "taskforge_tasks_enqueued_total", queue="mail") == 1


def test_counters_live_in_redis_not_in_the_process(run_on_commit) -> None:  # type: ignore[no-untyped-def]
    queue = QueueFactory(name="mail")
    run_on_commit(lifecycle.enqueue, queue, [lifecycle.NewTask(payload={})] * 3)
    assert redis_client().hget(counters.ENQUEUED_KEY, "mail") == b"3"
    # What another process (a loop in another container) wrote is part of every scrape.
    redis_client().hincrby(counters.COMPLETED_KEY, "mail|expired", 7)
    samples = scrape()
    assert value(samples, "taskforge_tasks_enqueued_total", queue="mail") == 3
    assert value(samples, "taskforge_tasks_completed_total", queue="mail", status="expired") == 7


def test_redis_down_never_fails_a_transition_and_counts_catch_up(
    run_on_commit, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    from django.conf import settings

    queue = QueueFactory(name="mail")
    working_url = settings.REDIS_URL
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setattr(taskforge.infra.redis, "_client", None)
    monkeypatch.setattr(counters, "RETRY_AFTER_SECONDS", 0.0)
    with caplog.at_level(logging.WARNING, logger="taskforge.metrics"):
        for _ in range(3):
            ((row, created),) = run_on_commit(lifecycle.enqueue, queue, [lifecycle.NewTask(payload={})])
            assert created and row["status"] == Status.PENDING
    warnings = [r for r in caplog.records if getattr(r, "event", None) == "metrics.write_failed"]
    assert len(warnings) == 1, "one warning per minute, not one per transition"
    assert lifecycle.fetch_rows("SELECT count(*) AS n FROM tf_task", [])[0]["n"] == 3

    # /metrics still answers (gauges from Postgres) while the counters are unreachable.
    samples = scrape()
    assert value(samples, "taskforge_queue_depth", queue="mail", status="pending") == 3
    assert value(samples, "taskforge_tasks_enqueued_total", queue="mail") is None

    # Redis is back: the increments kept in the process go out with the next write.
    monkeypatch.setattr(settings, "REDIS_URL", working_url)
    monkeypatch.setattr(taskforge.infra.redis, "_client", None)
    run_on_commit(lifecycle.enqueue, queue, [lifecycle.NewTask(payload={})])
    assert value(scrape(), "taskforge_tasks_enqueued_total", queue="mail") == 4


def test_depth_gauges_match_the_stats_endpoint() -> None:
    queue = QueueFactory(name="mail")
    empty = QueueFactory(name="empty")
    later = timezone.now() + timedelta(hours=1)
    TaskFactory.create_batch(2, queue=queue)
    TaskFactory(queue=queue, scheduled_at=later)
    TaskFactory(queue=queue, claimed=True)
    TaskFactory(queue=queue, expired_lease=True)
    TaskFactory(queue=queue, retry_due=True)
    TaskFactory(queue=queue, dead=True)
    TaskFactory.create_batch(3, queue=queue, done=True)
    TaskFactory(queue=queue, status=Status.CANCELLED, finished_at=timezone.now())

    samples = scrape()
    depth = {
        dict(labels)["status"]: v
        for labels, v in family(samples, "taskforge_queue_depth").items()
        if dict(labels)["queue"] == "mail"
    }
    expected = {
        "pending": 2,
        "scheduled": 1,
        "claimed": 1,
        "executing": 1,
        "retry": 1,
        "done": 3,
        "dead": 1,
        "cancelled": 1,
    }
    assert depth == expected
    (stats,) = queue_stats([queue])
    assert stats["depth"] == expected
    assert value(samples, "taskforge_dlq_depth", queue="mail") == 1 == stats["dlq_depth"]
    assert value(samples, "taskforge_queue_depth", queue="empty", status="pending") == 0
    assert value(samples, "taskforge_dlq_depth", queue="empty") == 0
    assert value(samples, "taskforge_queue_oldest_pending_age_seconds", queue="mail") > 0.5
    assert empty.name == "empty"


def test_finished_depth_is_recounted_at_most_every_30_seconds() -> None:
    queue = QueueFactory(name="mail")
    TaskFactory.create_batch(2, queue=queue, done=True)
    assert value(scrape(), "taskforge_queue_depth", queue="mail", status="done") == 2
    TaskFactory(queue=queue, done=True)
    TaskFactory(queue=queue)
    samples = scrape()
    # Active states are exact on every scrape; done comes from the shared 30 s cache.
    assert value(samples, "taskforge_queue_depth", queue="mail", status="pending") == 1
    assert value(samples, "taskforge_queue_depth", queue="mail", status="done") == 2
    assert redis_client().ttl(FINISHED_CACHE_KEY) > 0, "cached with an expiry"
    redis_client().delete(FINISHED_CACHE_KEY)
    assert value(scrape(), "taskforge_queue_depth", queue="mail", status="done") == 3


def test_worker_heartbeat_age_comes_from_the_registry() -> None:
    registry.seen("w-fresh", heartbeat=True)
    registry.seen("w-quiet", claim=True)
    registry.seen("w-gone", heartbeat=True)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE tf_worker SET last_claim_at = now() - interval '42 seconds' WHERE worker_id = 'w-quiet'")
        cursor.execute(
            "UPDATE tf_worker SET last_seen_at = now() - interval '11 minutes', "
            "last_heartbeat_at = now() - interval '11 minutes' WHERE worker_id = 'w-gone'"
        )
    ages = {
        dict(labels)["worker_id"]: v for labels, v in family(scrape(), "taskforge_worker_heartbeat_age_seconds").items()
    }
    assert set(ages) == {"w-fresh", "w-quiet"}, "workers unseen for 10 minutes drop out"
    assert 0 <= ages["w-fresh"] < 5
    assert 42 <= ages["w-quiet"] < 47


def test_metrics_token_when_configured(settings) -> None:  # type: ignore[no-untyped-def]
    settings.TASKFORGE_METRICS_TOKEN = "scrape-secret"
    assert Client().get("/metrics").status_code == 401
    wrong = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "unauthorized"
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret").status_code == 200


def test_request_metrics_of_django_prometheus_are_exported() -> None:
    client = Client()
    before = value(
        scrape(),
        "django_http_responses_total_by_status_view_method_total",
        status="200",
        view="healthz",
        method="GET",
    )
    for _ in range(3):
        assert client.get("/healthz").status_code == 200
    after = value(
        scrape(),
        "django_http_responses_total_by_status_view_method_total",
        status="200",
        view="healthz",
        method="GET",
    )
    assert after == (before or 0) + 3
