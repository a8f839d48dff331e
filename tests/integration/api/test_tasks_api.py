"""Task endpoints against API.md: enqueue (single, batch, idempotent), list, read, cancel, stats."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from queues.models import Status, Task, TaskEvent
from tests.contract import TASK_FIELDS
from tests.factories import QueueFactory, TaskFactory
from tests.integration.api.support import assert_error, claim, counts, enqueue, post

pytestmark = pytest.mark.django_db

TASK_KEYS = set(TASK_FIELDS)


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value)


def db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


# --- enqueue ----------------------------------------------------------------------


def test_enqueue_returns_the_task_object(producer, queue):
    response = post(producer, "/queues/email_jobs/tasks", {"payload": {"user_id": "abc123", "n": [1, 2.5, None]}})
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == TASK_KEYS
    uuid.UUID(body["id"])
    assert body["queue"] == "email_jobs"
    assert body["payload"] == {"user_id": "abc123", "n": [1, 2.5, None]}
    assert body["status"] == "pending"
    assert body["priority"] == 5
    assert body["attempts"] == 0
    assert body["max_retries"] == 3  # the queue's value at enqueue time
    assert body["scheduled_at"] == body["created_at"]  # always a timestamp: the enqueue time
    for name in ("claimed_at", "claimed_by", "heartbeat_at", "last_error", "result", "finished_at", "idempotency_key"):
        assert body[name] is None, name
    assert ts(body["created_at"]).utcoffset() == timedelta(0)
    stored = Task.objects.get(pk=body["id"])
    assert stored.payload == body["payload"]
    history = list(TaskEvent.objects.filter(task_id=body["id"]).values_list("from_status", "to_status"))
    assert history == [(None, "pending")]


def test_enqueue_with_every_field(producer, queue):
    at = (timezone.now() + timedelta(hours=2)).replace(microsecond=0)
    body = enqueue(
        producer,
        payload={"a": 1},
        priority=1,
        scheduled_at=at.isoformat(),
        idempotency_key="welcome-abc123",
        max_retries=0,
    )
    assert (body["priority"], body["max_retries"], body["idempotency_key"]) == (1, 0, "welcome-abc123")
    assert ts(body["scheduled_at"]) == at


def test_enqueue_with_trailing_slash(producer, queue):
    response = post(producer, "/queues/email_jobs/tasks/", {"payload": {}})
    assert response.status_code == 201


def test_enqueue_to_unknown_queue_is_404(producer):
    before = counts()
    assert_error(post(producer, "/queues/nope/tasks", {"payload": {}}), 404, "not_found")
    assert counts() == before


@pytest.mark.parametrize("offset", ["Z", "+00:00", "+02:00", "-05:30"])
def test_scheduled_at_offsets_are_honoured(producer, queue, offset):
    local = (timezone.now() + timedelta(hours=3)).replace(microsecond=0, tzinfo=None)
    body = enqueue(producer, payload={}, scheduled_at=local.isoformat() + offset)
    expected = datetime.fromisoformat(local.isoformat() + offset)
    assert ts(body["scheduled_at"]) == expected
    assert body["scheduled_at"].endswith("Z")  # rendered in UTC


def test_past_scheduled_at_means_now(producer, queue):
    body = enqueue(producer, payload={}, scheduled_at="2001-01-01T00:00:00Z")
    assert body["scheduled_at"] == body["created_at"]


def test_scheduled_at_up_to_365_days_ahead(producer, queue):
    at = timezone.now() + timedelta(days=364, hours=23)
    assert ts(enqueue(producer, payload={}, scheduled_at=at.isoformat())["scheduled_at"]) == at


def test_future_task_waits_for_its_time(producer, worker, queue):
    enqueue(producer, payload={}, scheduled_at=(timezone.now() + timedelta(hours=1)).isoformat())
    assert claim(worker, queue="email_jobs") == []


def test_task_max_retries_overrides_the_queue(producer, queue):
    assert enqueue(producer, payload={}, max_retries=25)["max_retries"] == 25
    assert enqueue(producer, payload={}, max_retries=None)["max_retries"] == 3


def test_payload_may_be_large_but_under_the_cap(producer, queue, settings):
    blob = "x" * (settings.TASKFORGE_MAX_PAYLOAD_BYTES - 100)
    assert post(producer, "/queues/email_jobs/tasks", {"payload": {"b": blob}}).status_code == 201


# --- idempotency --------------------------------------------------------------------


def test_idempotent_replay_returns_existing_task_with_200(producer, queue):
    body = {"payload": {"user_id": "abc123"}, "idempotency_key": "welcome-abc123", "priority": 2}
    first = post(producer, "/queues/email_jobs/tasks", body)
    second = post(producer, "/queues/email_jobs/tasks", body)
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json() == first.json()
    assert Task.objects.count() == 1
    assert TaskEvent.objects.count() == 1


def test_idempotent_replay_after_the_task_moved_on(producer, worker, queue):
    body = {"payload": {"x": 1}, "idempotency_key": "k"}
    first = post(producer, "/queues/email_jobs/tasks", body).json()
    claim(worker, queue="email_jobs")
    again = post(producer, "/queues/email_jobs/tasks", body)
    assert again.status_code == 200
    assert again.json()["id"] == first["id"]
    assert again.json()["status"] == "claimed"


@pytest.mark.parametrize(
    "changed",
    [
        {"payload": {"user_id": "other"}},
        {"payload": {"user_id": "abc123"}, "priority": 4},
        {"payload": {"user_id": "abc123"}, "max_retries": 1},
    ],
)
def test_idempotency_key_with_another_body_is_409(producer, queue, changed):
    post(producer, "/queues/email_jobs/tasks", {"payload": {"user_id": "abc123"}, "idempotency_key": "k"})
    before = counts()
    response = post(producer, "/queues/email_jobs/tasks", {**changed, "idempotency_key": "k"})
    error = assert_error(response, 409, "conflict")
    assert "k" in error["message"]
    assert counts() == before


def test_idempotency_key_is_per_queue(producer, queue):
    QueueFactory(name="other")
    a = enqueue(producer, "email_jobs", payload={}, idempotency_key="k")
    b = enqueue(producer, "other", payload={}, idempotency_key="k")
    assert a["id"] != b["id"]
    assert Task.objects.count() == 2


def test_idempotency_key_order_of_fields_does_not_matter(producer, queue):
    raw_a = b'{"payload": {"a": 1, "b": 2}, "idempotency_key": "k"}'
    raw_b = b'{"idempotency_key": "k", "payload": {"b": 2, "a": 1}}'
    first = producer.post("/queues/email_jobs/tasks", raw_a, content_type="application/json")
    second = producer.post("/queues/email_jobs/tasks", raw_b, content_type="application/json")
    assert (first.status_code, second.status_code) == (201, 200)


# --- batch ---------------------------------------------------------------------------


def test_batch_enqueue(producer, queue):
    items = [{"payload": {"n": n}, "priority": 1 + n % 10} for n in range(25)]
    response = post(producer, "/queues/email_jobs/tasks/batch", {"tasks": items})
    assert response.status_code == 201, response.content
    tasks = response.json()["tasks"]
    assert [t["payload"]["n"] for t in tasks] == list(range(25))  # in the order given
    assert [t["priority"] for t in tasks] == [1 + n % 10 for n in range(25)]
    assert all(set(t) == TASK_KEYS and t["status"] == "pending" for t in tasks)
    assert len({t["id"] for t in tasks}) == 25
    assert Task.objects.count() == 25


def test_batch_with_trailing_slash_and_max_size(producer, queue):
    items = [{"payload": {}}] * 1000
    response = post(producer, "/queues/email_jobs/tasks/batch/", {"tasks": items})
    assert response.status_code == 201
    assert Task.objects.count() == 1000


def test_batch_is_all_or_nothing_with_fields_keyed_by_index(producer, queue):
    items = [{"payload": {"n": n}} for n in range(5)]
    items[3]["priority"] = 11
    items[1]["priorty"] = 3
    items[4] = {"payload": "not an object"}
    before = counts()
    error = assert_error(post(producer, "/queues/email_jobs/tasks/batch", {"tasks": items}), 400, "validation_error")
    assert set(error["fields"]) == {"3.priority", "1.priorty", "4.payload"}
    assert counts() == before


def test_batch_item_that_is_not_an_object(producer, queue):
    before = counts()
    error = assert_error(post(producer, "/queues/email_jobs/tasks/batch", {"tasks": [{"payload": {}}, 7]}), 400)
    assert list(error["fields"]) == ["1"]
    assert counts() == before


@pytest.mark.parametrize("tasks", [[], [{"payload": {}}] * 1001, {"payload": {}}, None])
def test_batch_size_and_shape(producer, queue, tasks):
    before = counts()
    assert_error(post(producer, "/queues/email_jobs/tasks/batch", {"tasks": tasks}), 400, fields=["tasks"])
    assert counts() == before


def test_batch_same_key_twice_is_400(producer, queue):
    items = [{"payload": {}, "idempotency_key": "a"}, {"payload": {}, "idempotency_key": "b"}]
    items.append({"payload": {}, "idempotency_key": "a"})
    before = counts()
    error = assert_error(post(producer, "/queues/email_jobs/tasks/batch", {"tasks": items}), 400)
    assert list(error["fields"]) == ["2.idempotency_key"]
    assert counts() == before


def test_batch_existing_key_puts_the_existing_task_in_its_slot(producer, queue):
    existing = enqueue(producer, payload={"n": 1}, idempotency_key="k1")
    items = [{"payload": {"n": 0}}, {"payload": {"n": 1}, "idempotency_key": "k1"}, {"payload": {"n": 2}}]
    response = post(producer, "/queues/email_jobs/tasks/batch", {"tasks": items})
    assert response.status_code == 201
    tasks = response.json()["tasks"]
    assert tasks[1]["id"] == existing["id"]
    assert [t["payload"]["n"] for t in tasks] == [0, 1, 2]
    assert Task.objects.count() == 3


def test_batch_existing_key_with_another_body_fails_the_whole_batch(producer, queue):
    enqueue(producer, payload={"n": 1}, idempotency_key="k1")
    before = counts()
    items = [{"payload": {"n": 0}}, {"payload": {"n": 99}, "idempotency_key": "k1"}]
    assert_error(post(producer, "/queues/email_jobs/tasks/batch", {"tasks": items}), 409, "conflict")
    assert counts() == before


def test_batch_to_unknown_queue_is_404(producer):
    assert_error(post(producer, "/queues/nope/tasks/batch", {"tasks": [{"payload": {}}]}), 404, "not_found")


# --- read ----------------------------------------------------------------------------


def test_read_task_with_history(producer, worker, queue):
    created = enqueue(producer)
    (leased,) = claim(worker, queue="email_jobs")
    post(worker, "/workers/heartbeat", {"worker_id": "w-1", "task_id": leased["id"]})
    post(worker, "/workers/nack", {"worker_id": "w-1", "task_id": leased["id"], "error": "downstream timeout"})
    response = producer.get(f"/queues/email_jobs/tasks/{created['id']}/")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == TASK_KEYS | {"history"}
    assert body["status"] == "retry"
    assert body["last_error"] == "downstream timeout"
    history = body["history"]
    assert [(h["from_status"], h["to_status"]) for h in history] == [
        (None, "pending"),
        ("pending", "claimed"),
        ("claimed", "executing"),
        ("executing", "retry"),
    ]
    assert all(set(h) == {"at", "from_status", "to_status", "worker_id", "detail"} for h in history)
    assert [h["worker_id"] for h in history] == [None, "w-1", "w-1", "w-1"]
    assert history[-1]["detail"] == "downstream timeout"
    assert [ts(h["at"]) for h in history] == sorted(ts(h["at"]) for h in history)


def test_heartbeats_are_not_history(producer, worker, queue):
    created = enqueue(producer)
    (leased,) = claim(worker)
    for _ in range(3):
        assert post(worker, "/workers/heartbeat", {"worker_id": "w-1", "task_id": leased["id"]}).status_code == 200
    history = producer.get(f"/queues/email_jobs/tasks/{created['id']}").json()["history"]
    assert [h["to_status"] for h in history] == ["pending", "claimed", "executing"]


@pytest.mark.parametrize("task_id", ["not-a-uuid", "123", "0" * 33, "%00"])
def test_read_malformed_task_id_is_404(producer, queue, task_id):
    assert_error(producer.get(f"/queues/email_jobs/tasks/{task_id}"), 404, "not_found")


def test_read_unknown_task_is_404(producer, queue):
    assert_error(producer.get(f"/queues/email_jobs/tasks/{uuid.uuid4()}"), 404, "not_found")


def test_read_task_through_another_queue_is_404(producer, queue):
    other = TaskFactory(queue=QueueFactory(name="other"))
    assert_error(producer.get(f"/queues/email_jobs/tasks/{other.id}"), 404, "not_found")
    assert_error(producer.get(f"/queues/nope/tasks/{other.id}"), 404, "not_found")


# --- list ----------------------------------------------------------------------------


def listing(client, query=""):
    response = client.get(f"/queues/email_jobs/tasks{query}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"results", "next"}
    return body


def at_offsets(queue, *seconds):
    """Tasks created at distinct times (in one test transaction, now() never moves)."""
    base = timezone.now()
    return [str(TaskFactory(queue=queue, created_at=base + timedelta(seconds=s), payload={"n": s}).id) for s in seconds]


def test_list_newest_first(producer, queue):
    ids = at_offsets(queue, 0, 1, 2)
    body = listing(producer)
    assert [t["id"] for t in body["results"]] == ids[::-1]
    assert body["next"] is None
    assert all(set(t) == TASK_KEYS for t in body["results"])


def test_list_walks_every_page_without_duplicates(producer, queue):
    # A batch shares one created_at: the cursor must break ties by id.
    post(producer, "/queues/email_jobs/tasks/batch", {"tasks": [{"payload": {"n": n}} for n in range(23)]})
    for n in range(4):
        enqueue(producer, payload={"n": 100 + n})
    seen: list[str] = []
    query = "?limit=5"
    pages = 0
    while True:
        body = listing(producer, query)
        pages += 1
        assert len(body["results"]) <= 5
        seen.extend(t["id"] for t in body["results"])
        if body["next"] is None:
            break
        query = f"?limit=5&cursor={body['next']}"
    assert pages == 6
    assert len(seen) == len(set(seen)) == 27
    assert set(seen) == {str(pk) for pk in Task.objects.values_list("id", flat=True)}


def test_list_cursor_is_stable_while_tasks_arrive(producer, queue):
    at_offsets(queue, 0, 1, 2, 3)
    first = listing(producer, "?limit=2")
    at_offsets(queue, 4)
    second = listing(producer, f"?limit=2&cursor={first['next']}")
    assert [t["payload"]["n"] for t in first["results"] + second["results"]] == [3, 2, 1, 0]


def test_list_default_and_max_limit(producer, queue):
    post(producer, "/queues/email_jobs/tasks/batch", {"tasks": [{"payload": {}}] * 501})
    assert len(listing(producer)["results"]) == 50
    body = listing(producer, "?limit=500")
    assert len(body["results"]) == 500 and body["next"]
    assert len(listing(producer, "?limit=1")["results"]) == 1


def test_list_filters(producer, queue):
    now = timezone.now()
    old = TaskFactory(queue=queue, created_at=now - timedelta(hours=2))
    claimed = TaskFactory(queue=queue, claimed=True, claimed_by="w-9", created_at=now - timedelta(hours=1))
    done = TaskFactory(queue=queue, done=True, claimed_by="w-9", created_at=now)
    TaskFactory(queue=QueueFactory(name="other"), claimed=True, claimed_by="w-9")

    def ids(query):
        return [t["id"] for t in listing(producer, query)["results"]]

    assert ids("?status=claimed") == [str(claimed.id)]
    assert ids("?status=done") == [str(done.id)]
    assert ids("?status=dead") == []
    assert ids("?claimed_by=w-9") == [str(done.id), str(claimed.id)]
    after = (now - timedelta(minutes=90)).isoformat().replace("+00:00", "Z")
    assert ids(f"?created_after={after}") == [str(done.id), str(claimed.id)]
    before = (now - timedelta(minutes=30)).isoformat()
    assert ids(f"?created_before={before.replace('+', '%2B')}") == [str(claimed.id), str(old.id)]
    assert ids(f"?created_after={after}&created_before={before.replace('+', '%2B')}&status=claimed") == [
        str(claimed.id)
    ]
    # An unescaped '+' arrives as a space and is still understood.
    assert ids(f"?created_before={before}") == [str(claimed.id), str(old.id)]


def test_list_unknown_queue_is_404(producer):
    assert_error(producer.get("/queues/nope/tasks"), 404, "not_found")


# --- cancel ---------------------------------------------------------------------------


@pytest.mark.parametrize("traits", [{}, {"retry_due": True}], ids=["pending", "retry"])
def test_cancel(producer, queue, traits):
    task = TaskFactory(queue=queue, **traits)
    response = producer.delete(f"/queues/email_jobs/tasks/{task.id}")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == TASK_KEYS
    assert body["status"] == "cancelled"
    assert body["finished_at"] is not None
    task.refresh_from_db()
    assert task.status == Status.CANCELLED
    event = TaskEvent.objects.get(task_id=task.id)
    assert (event.from_status, event.to_status) == ("retry" if traits else "pending", "cancelled")


@pytest.mark.parametrize(
    "traits",
    [{"done": True}, {"dead": True}, {"status": Status.CANCELLED}],
    ids=["done", "dead", "cancelled"],  # claimed and executing tasks are asked to stop: test_cancel_running.py
)
def test_cancel_non_cancellable_is_409(producer, queue, traits):
    task = TaskFactory(queue=queue, **traits)
    before = counts()
    error = assert_error(producer.delete(f"/queues/email_jobs/tasks/{task.id}/"), 409, "conflict")
    assert task.status in error["message"]
    assert Task.objects.get(pk=task.id).status == task.status
    assert counts() == before


def test_cancel_unknown_or_malformed_is_404(producer, queue):
    assert_error(producer.delete(f"/queues/email_jobs/tasks/{uuid.uuid4()}"), 404, "not_found")
    assert_error(producer.delete("/queues/email_jobs/tasks/zzz"), 404, "not_found")
    other = TaskFactory(queue=QueueFactory(name="other"))
    assert_error(producer.delete(f"/queues/email_jobs/tasks/{other.id}"), 404, "not_found")
    assert Task.objects.get(pk=other.id).status == Status.PENDING


def test_cancelled_task_is_never_claimed(producer, worker, queue):
    task = enqueue(producer)
    producer.delete(f"/queues/email_jobs/tasks/{task['id']}")
    assert claim(worker, queue="email_jobs") == []


# --- stats -----------------------------------------------------------------------------

STATS_KEYS = {
    "queue",
    "depth",
    "dlq_depth",
    "enqueued_per_sec",
    "completed_per_sec",
    "error_rate",
    "oldest_pending_age_seconds",
    "paused",
}


def test_stats_of_an_empty_queue(producer, queue):
    response = producer.get("/queues/email_jobs/stats")
    assert response.status_code == 200
    assert response.json() == {
        "queue": "email_jobs",
        "depth": {
            "pending": 0,
            "scheduled": 0,
            "claimed": 0,
            "executing": 0,
            "retry": 0,
            "done": 0,
            "dead": 0,
            "cancelled": 0,
        },
        "dlq_depth": 0,
        "enqueued_per_sec": 0,
        "completed_per_sec": 0,
        "error_rate": 0,
        "oldest_pending_age_seconds": None,
        "paused": False,
    }


def test_stats_depths(producer, queue):
    now = db_now()
    TaskFactory.create_batch(2, queue=queue, scheduled_at=now - timedelta(seconds=100))
    TaskFactory(queue=queue, scheduled_at=now - timedelta(seconds=5))
    TaskFactory.create_batch(3, queue=queue, scheduled_at=now + timedelta(hours=1))
    TaskFactory(queue=queue, claimed=True)
    TaskFactory.create_batch(4, queue=queue, expired_lease=True)
    TaskFactory.create_batch(2, queue=queue, retry_due=True)
    TaskFactory.create_batch(5, queue=queue, done=True)
    TaskFactory(queue=queue, dead=True)
    TaskFactory.create_batch(2, queue=queue, status=Status.CANCELLED)
    TaskFactory(queue=QueueFactory(name="other"))
    body = producer.get("/queues/email_jobs/stats/").json()
    assert set(body) == STATS_KEYS
    assert body["depth"] == {
        "pending": 3,
        "scheduled": 3,
        "claimed": 1,
        "executing": 4,
        "retry": 2,
        "done": 5,
        "dead": 1,
        "cancelled": 2,
    }
    assert body["dlq_depth"] == 1
    # The oldest due pending task has been due for ~100 s (not counting the scheduled ones).
    assert 100 <= body["oldest_pending_age_seconds"] < 110


def test_stats_rates_and_error_rate(producer, worker, queue):
    queue.max_retries = 0
    queue.save()
    for n in range(6):
        enqueue(producer, payload={"n": n})
    leased = claim(worker, queue="email_jobs", max_tasks=5)
    for task in leased[:3]:
        assert post(worker, "/workers/ack", {"worker_id": "w-1", "task_id": task["id"]}).status_code == 200
    # one nack (dead: no retries) and one lease expiry are the failed attempts
    post(worker, "/workers/nack", {"worker_id": "w-1", "task_id": leased[3]["id"], "error": "x"})
    Task.objects.filter(pk=leased[4]["id"]).update(lease_expires_at=timezone.now() - timedelta(minutes=5))
    from queues import lifecycle

    assert lifecycle.expire_leases() == 1
    # A cancel is not an attempt.
    pending = Task.objects.get(status=Status.PENDING)
    producer.delete(f"/queues/email_jobs/tasks/{pending.id}")
    # Events older than the 60 s window do not count.
    old = TaskFactory(queue=queue, done=True)
    TaskEvent.objects.create(
        task=old, queue=queue, at=db_now() - timedelta(seconds=61), from_status="claimed", to_status="done"
    )
    TaskEvent.objects.create(task=old, queue=queue, at=db_now() - timedelta(seconds=61), to_status="pending")
    body = producer.get("/queues/email_jobs/stats").json()
    assert body["enqueued_per_sec"] == pytest.approx(6 / 60, abs=0.001)
    assert body["completed_per_sec"] == pytest.approx(3 / 60, abs=0.001)
    assert body["error_rate"] == pytest.approx(2 / 5, abs=0.0001)
    assert body["depth"]["dead"] == body["dlq_depth"] == 2
    assert body["oldest_pending_age_seconds"] is None


def test_stats_show_paused(admin_api, producer, queue):
    admin_api.patch("/queues/email_jobs", {"paused": True}, format="json")
    assert producer.get("/queues/email_jobs/stats").json()["paused"] is True


def test_stats_unknown_queue_is_404(producer):
    assert_error(producer.get("/queues/nope/stats"), 404, "not_found")
