"""Queue history: the sampler (queues.loops.history) and ``GET /queues/{name}/history``."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import quote

import pytest
from django.db import connection

from queues import lifecycle
from queues.loops import history as sampler
from queues.models import QueueSample
from queues.telemetry import counters, history
from queues.telemetry.counters import BUCKETS
from taskforge.infra.clock import database_now
from tests.integration.api.support import assert_error

pytestmark = pytest.mark.django_db

URL = "/queues/email_jobs/history"


def minute_ago(minutes: int):  # type: ignore[no-untyped-def]
    return (database_now() - timedelta(minutes=minutes)).replace(second=0, microsecond=0)


def store(queue: str, minutes_ago: int, **counts: int) -> QueueSample:
    empty = [0] * len(BUCKETS)
    fields = {"enqueued": 0, "done": 0, "failed": 0, "dead": 0, "expired": 0, "cancelled": 0, **counts}
    return QueueSample.objects.create(
        queue_name=queue,
        minute=minute_ago(minutes_ago),
        taken_at=minute_ago(minutes_ago),
        run_buckets=empty,
        wait_buckets=empty,
        **fields,
    )


@pytest.mark.django_db(transaction=True)  # counters are written once the moves commit
def test_the_sampler_copies_the_counters_once_a_minute_whoever_runs_it(queue):
    lifecycle.enqueue(queue, [lifecycle.NewTask(payload={"n": n}) for n in range(3)])
    rows = lifecycle.claim("w-1", [queue.id], 2)
    for row in rows:
        lifecycle.ack(row["id"], worker_id="w-1", lease_token=row["lease_token"], result=None)
    first = sampler.run_once()
    again = sampler.run_once()  # another sampler, the same minute: nothing more
    assert (first.sampled, again.sampled) == (1, 0)
    (taken,) = QueueSample.objects.filter(queue_name="email_jobs")
    assert (taken.enqueued, taken.done, taken.failed) == (3, 2, 0)
    assert taken.run_buckets[-1] == 2  # two executions observed, cumulative up to +Inf
    assert taken.wait_buckets[-1] == 2  # and two claims' enqueue-to-start
    with connection.cursor() as cursor:
        cursor.execute("SELECT date_trunc('minute', now())")
        assert taken.minute == cursor.fetchone()[0]


def test_the_sampler_prunes_past_the_retention(queue, settings):
    settings.TASKFORGE_HISTORY_DAYS = 1
    old = store("email_jobs", 60 * 24 + 5)
    kept = store("email_jobs", 60 * 23)
    assert sampler.run_once().pruned == 1
    assert set(QueueSample.objects.values_list("pk", flat=True)) >= {kept.pk}
    assert not QueueSample.objects.filter(pk=old.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_claims_feed_the_wait_histogram_on_metrics(queue, client):
    lifecycle.enqueue(queue, [lifecycle.NewTask(payload={})])
    lifecycle.claim("w-1", [queue.id], 1)
    waits = counters.snapshot().waits["email_jobs"]
    assert waits[0][-1][1] == 1
    assert 'taskforge_task_wait_seconds_count{queue="email_jobs"} 1.0' in client.get("/metrics").content.decode()


def test_points_per_minute_and_per_step(producer, queue):
    store("email_jobs", 4, enqueued=10, done=5)
    store("email_jobs", 3, enqueued=40, done=25, failed=3, dead=1)
    store("email_jobs", 2, enqueued=41, done=40, failed=3, dead=1, expired=2)
    store("elsewhere", 3, enqueued=1000)  # another queue's
    body = producer.get(f"{URL}?since={quote(minute_ago(4).isoformat())}").json()
    assert body["queue"] == "email_jobs" and body["step"] == 60
    first, second, third = body["points"][:3]
    assert (first["enqueued"], first["completed"], first["failed"], first["dead"]) == (30, 20, 3, 1)
    assert (second["enqueued"], second["completed"], second["expired"]) == (1, 15, 2)
    assert third["enqueued"] is None  # no later sample: not known yet
    wide = producer.get(f"{URL}?since={quote(minute_ago(4).isoformat())}&step=120").json()["points"]
    assert wide[0]["completed"] == 35


def test_default_window_is_the_last_hour_by_minute(producer, queue):
    points = producer.get(URL).json()["points"]
    assert 60 <= len(points) <= 61
    assert set(points[0]) == {"at", *history.POINT_FIELDS}


@pytest.mark.parametrize(
    "query",
    ["step=30", "step=90", "step=abc", "step=100000", "since=yesterday", "since=2999-01-01T00:00:00Z", "until=x"],
)
def test_bad_parameters_are_400(producer, queue, query):
    assert_error(producer.get(f"{URL}?{query}"), 400, "validation_error")


def test_too_many_points_is_400_and_old_since_is_clamped(producer, queue, settings):
    week_ago = quote((database_now() - timedelta(days=7)).isoformat())
    assert_error(producer.get(f"{URL}?since={week_ago}&step=60"), 400, "validation_error", fields=["step"])
    settings.TASKFORGE_HISTORY_DAYS = 1
    clamped = producer.get(f"{URL}?since={week_ago}&step=3600").json()
    assert len(clamped["points"]) in (24, 25)


def test_roles_and_unknown_queue(client, worker, producer, queue):
    assert_error(client.get(URL), 401)
    assert_error(worker.get(URL), 403)
    assert_error(producer.get("/queues/nope/history"), 404)
