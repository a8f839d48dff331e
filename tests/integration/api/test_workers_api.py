"""The worker protocol against API.md: claim, heartbeat, ack, nack, their batch forms, GET /workers."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from queues import lifecycle
from queues.models import DeadLetterTask, Status, Task, TaskEvent
from tests.factories import QueueFactory, TaskFactory
from tests.integration.api.support import assert_error, claim, counts, enqueue, post

pytestmark = pytest.mark.django_db


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value)


def expire(task_id) -> None:
    """Let the lease run out (set-up: time is moved, not slept)."""
    Task.objects.filter(pk=task_id).update(lease_expires_at=timezone.now() - timedelta(minutes=5))


def leased(worker, producer, worker_id="w-1", **enqueue_body):
    enqueue(producer, **enqueue_body)
    (task,) = claim(worker, worker_id, queue="email_jobs")
    return task


# --- claim ----------------------------------------------------------------------------------


def test_claim_leases_the_task(producer, worker, queue, settings):
    created = enqueue(producer)
    response = post(worker, "/workers/claim", {"worker_id": "w-1", "queue": "email_jobs"})
    assert response.status_code == 200
    (task,) = response.json()["tasks"]
    assert task["id"] == created["id"]
    assert task["status"] == "claimed"
    assert task["attempts"] == 1
    assert task["claimed_by"] == "w-1"
    assert task["claimed_at"] is not None
    assert isinstance(task["lease_token"], str) and len(task["lease_token"]) >= 16
    lease = ts(task["lease_expires_at"]) - ts(task["claimed_at"])
    assert lease == timedelta(seconds=settings.TASKFORGE_HEARTBEAT_TIMEOUT)
    stored = Task.objects.get(pk=task["id"])
    assert (stored.status, stored.claimed_by, stored.lease_token) == ("claimed", "w-1", task["lease_token"])


def test_claim_empty_queue(worker, queue):
    response = post(worker, "/workers/claim/", {"worker_id": "w-1", "queue": "email_jobs"})
    assert response.status_code == 200
    assert response.json() == {"tasks": []}


def test_claim_unknown_queue_is_404(worker):
    assert_error(post(worker, "/workers/claim", {"worker_id": "w-1", "queue": "nope"}), 404, "not_found")


def test_claim_order_priority_then_oldest(producer, worker, queue):
    now = timezone.now()
    late_high = TaskFactory(queue=queue, priority=1, scheduled_at=now - timedelta(seconds=30))
    early_low = TaskFactory(queue=queue, priority=9, scheduled_at=now - timedelta(hours=1))
    early_high = TaskFactory(queue=queue, priority=1, scheduled_at=now - timedelta(minutes=5))
    mid = TaskFactory(queue=queue, priority=5, scheduled_at=now - timedelta(minutes=1))
    TaskFactory(queue=queue, priority=1, scheduled_at=now + timedelta(minutes=1))  # not due
    tasks = claim(worker, queue="email_jobs", max_tasks=10)
    assert [t["id"] for t in tasks] == [str(t.id) for t in (early_high, late_high, mid, early_low)]


def test_claim_any_queue_lowest_priority_number_first(worker, queue):
    other = QueueFactory(name="other")
    paused = QueueFactory(name="paused", paused=True)
    now = timezone.now()
    a = TaskFactory(queue=queue, priority=5, scheduled_at=now - timedelta(minutes=10))
    b = TaskFactory(queue=other, priority=2, scheduled_at=now - timedelta(minutes=1))
    TaskFactory(queue=paused, priority=1)
    tasks = claim(worker, max_tasks=5)
    assert [(t["id"], t["queue"]) for t in tasks] == [(str(b.id), "other"), (str(a.id), "email_jobs")]


def test_claim_max_tasks(worker, queue):
    TaskFactory.create_batch(7, queue=queue)
    assert len(claim(worker, queue="email_jobs")) == 1  # default
    assert len(claim(worker, queue="email_jobs", max_tasks=4)) == 4
    assert len(claim(worker, queue="email_jobs", max_tasks=100)) == 2


def test_claim_long_poll_returns_empty_when_the_wait_is_over(worker, queue):
    started = time.monotonic()
    assert claim(worker, queue="email_jobs", wait_seconds=1) == []
    assert 0.9 <= time.monotonic() - started < 5


def test_claim_long_poll_returns_at_once_when_tasks_are_there(worker, queue):
    TaskFactory(queue=queue)
    started = time.monotonic()
    assert len(claim(worker, queue="email_jobs", wait_seconds=30)) == 1
    assert time.monotonic() - started < 2


def test_claimed_task_is_not_claimed_again(producer, worker, queue):
    leased(worker, producer)
    assert claim(worker, "w-2", queue="email_jobs") == []


# --- heartbeat --------------------------------------------------------------------------------


def test_first_heartbeat_moves_claimed_to_executing(producer, worker, queue, settings):
    task = leased(worker, producer)
    body = {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"]}
    response = post(worker, "/workers/heartbeat", body)
    assert response.status_code == 200
    beat = response.json()
    assert set(beat) == {"task_id", "status", "lease_expires_at", "cancel_requested"}
    assert (beat["task_id"], beat["status"]) == (task["id"], "executing")
    stored = Task.objects.get(pk=task["id"])
    assert stored.heartbeat_at is not None
    assert stored.lease_expires_at == stored.heartbeat_at + timedelta(seconds=settings.TASKFORGE_HEARTBEAT_TIMEOUT)
    assert ts(beat["lease_expires_at"]) == stored.lease_expires_at
    # A second heartbeat (token optional) keeps it executing.
    again = post(worker, "/workers/heartbeat/", {"worker_id": "w-1", "task_id": task["id"]})
    assert again.status_code == 200
    assert again.json()["status"] == "executing"


def test_heartbeat_extends_a_lease_about_to_expire(producer, worker, queue):
    task = leased(worker, producer)
    Task.objects.filter(pk=task["id"]).update(lease_expires_at=timezone.now() + timedelta(milliseconds=500))
    response = post(worker, "/workers/heartbeat", {"worker_id": "w-1", "task_id": task["id"]})
    assert response.status_code == 200
    assert ts(response.json()["lease_expires_at"]) > timezone.now() + timedelta(seconds=5)


def test_heartbeat_unknown_task_is_404(worker, queue):
    assert_error(post(worker, "/workers/heartbeat", {"worker_id": "w-1", "task_id": str(uuid.uuid4())}), 404)


# --- ownership: heartbeat, ack and nack from anyone but the holder -------------------------------

VERBS = {
    "heartbeat": {},
    "ack": {"result": {"ok": True}},
    "nack": {"error": "boom"},
}


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("who", ["wrong_worker", "wrong_token", "expired", "reclaimed", "finished", "pending"])
def test_only_the_lease_holder_may_report(producer, worker, queue, verb, who):
    task = leased(worker, producer)
    body = {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"], **VERBS[verb]}
    if who == "wrong_worker":
        body["worker_id"] = "w-2"
    elif who == "wrong_token":
        body["lease_token"] = uuid.uuid4().hex
    elif who == "expired":
        expire(task["id"])
    elif who == "reclaimed":
        # The watchdog reclaimed it and another worker holds it now.
        expire(task["id"])
        from queues import lifecycle

        assert lifecycle.expire_leases() == 1
        Task.objects.filter(pk=task["id"]).update(scheduled_at=timezone.now() - timedelta(minutes=5))
        lifecycle.promote_due()
        (again,) = claim(worker, "w-2", queue="email_jobs")
        assert again["id"] == task["id"]
    elif who == "finished":
        assert (
            post(worker, "/workers/nack", {"worker_id": "w-1", "task_id": task["id"], "error": "x"}).status_code == 200
        )
    elif who == "pending":
        body["task_id"] = enqueue(producer, payload={"other": 1})["id"]
    before = Task.objects.get(pk=body["task_id"])
    events = TaskEvent.objects.count()
    assert_error(post(worker, f"/workers/{verb}", body), 409, "lease_lost")
    after = Task.objects.get(pk=body["task_id"])
    assert (after.status, after.updated_at, after.lease_expires_at) == (
        before.status,
        before.updated_at,
        before.lease_expires_at,
    )
    assert TaskEvent.objects.count() == events


# --- ack ----------------------------------------------------------------------------------------


def test_ack(producer, worker, queue):
    task = leased(worker, producer)
    body = {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"], "result": {"sent": 1}}
    response = post(worker, "/workers/ack", body)
    assert response.status_code == 200
    done = response.json()
    assert "lease_token" not in done
    assert (done["status"], done["result"], done["attempts"]) == ("done", {"sent": 1}, 1)
    assert done["finished_at"] is not None
    assert Task.objects.get(pk=task["id"]).status == Status.DONE


def test_ack_without_result_or_token(producer, worker, queue):
    task = leased(worker, producer)
    response = post(worker, "/workers/ack/", {"worker_id": "w-1", "task_id": task["id"]})
    assert response.status_code == 200
    assert response.json()["result"] is None


def test_ack_from_executing(producer, worker, queue):
    task = leased(worker, producer)
    post(worker, "/workers/heartbeat", {"worker_id": "w-1", "task_id": task["id"]})
    assert post(worker, "/workers/ack", {"worker_id": "w-1", "task_id": task["id"]}).json()["status"] == "done"


def test_repeated_ack_is_200_and_changes_nothing(producer, worker, queue):
    task = leased(worker, producer)
    body = {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"], "result": {"n": 1}}
    first = post(worker, "/workers/ack", body)
    events = TaskEvent.objects.count()
    second = post(worker, "/workers/ack", {**body, "result": {"n": 2}})
    assert first.status_code == second.status_code == 200
    assert second.json() == first.json()
    assert Task.objects.get(pk=task["id"]).result == {"n": 1}
    assert TaskEvent.objects.count() == events
    # ... but only for the same worker and lease.
    assert_error(post(worker, "/workers/ack", {**body, "worker_id": "w-2"}), 409, "lease_lost")
    assert_error(post(worker, "/workers/ack", {**body, "lease_token": "0" * 32}), 409, "lease_lost")


def test_ack_unknown_task_is_404(worker, queue):
    assert_error(post(worker, "/workers/ack", {"worker_id": "w-1", "task_id": str(uuid.uuid4())}), 404, "not_found")


def test_done_task_is_never_claimed_again(producer, worker, queue):
    task = leased(worker, producer)
    post(worker, "/workers/ack", {"worker_id": "w-1", "task_id": task["id"]})
    assert claim(worker, queue="email_jobs") == []


# --- nack ---------------------------------------------------------------------------------------


def test_nack_schedules_a_retry_with_backoff(producer, worker, queue):
    queue.retry_base_ms = 60_000
    queue.save()
    task = leased(worker, producer)
    response = post(worker, "/workers/nack", {"worker_id": "w-1", "task_id": task["id"], "error": "downstream timeout"})
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["last_error"], body["attempts"]) == ("retry", "downstream timeout", 1)
    delay = ts(body["scheduled_at"]) - ts(body["updated_at"])
    assert timedelta(seconds=60) <= delay <= timedelta(seconds=120)
    assert not DeadLetterTask.objects.exists()


def test_nack_retry_after_seconds_overrides_backoff_and_max_delay(producer, worker, queue):
    queue.retry_max_delay_ms = 1000
    queue.save()
    task = leased(worker, producer)
    body = post(
        worker,
        "/workers/nack",
        {"worker_id": "w-1", "task_id": task["id"], "error": "429", "retry_after_seconds": 2_592_000},
    ).json()
    assert body["status"] == "retry"
    assert ts(body["scheduled_at"]) - ts(body["updated_at"]) == timedelta(days=30)


def test_nack_retry_false_is_dead_at_once(producer, worker, queue):
    task = leased(worker, producer)
    body = post(
        worker, "/workers/nack", {"worker_id": "w-1", "task_id": task["id"], "error": "bad input", "retry": False}
    ).json()
    assert (body["status"], body["attempts"], body["last_error"]) == ("dead", 1, "bad input")
    entry = DeadLetterTask.objects.get(pk=task["id"])
    assert (entry.attempts, entry.last_error, entry.replay_count) == (1, "bad input", 0)


def test_nack_when_attempts_are_used_up_wins_over_retry_after(producer, worker, queue):
    task = leased(worker, producer, max_retries=0)
    body = post(
        worker,
        "/workers/nack",
        {"worker_id": "w-1", "task_id": task["id"], "error": "again", "retry_after_seconds": 5},
    ).json()
    assert body["status"] == "dead"
    assert DeadLetterTask.objects.filter(pk=task["id"]).exists()


def test_a_released_task_is_retried_and_gets_its_attempt_back(producer, worker, queue):
    task = leased(worker, producer, max_retries=0)  # its only attempt: a failed one would be dead
    body = post(
        worker,
        "/workers/nack",
        {"worker_id": "w-1", "task_id": task["id"], "error": "worker shutting down", "release": True},
    ).json()
    assert (body["status"], body["attempts"], body["last_error"]) == ("retry", 0, None)
    assert ts(body["scheduled_at"]) <= ts(body["updated_at"])  # due at once
    assert not DeadLetterTask.objects.exists()
    event = TaskEvent.objects.filter(task_id=task["id"]).latest("at")
    assert (event.from_status, event.to_status, event.detail) == ("claimed", "retry", "released: worker shutting down")
    # The next claim is its first attempt again, and failing that one is final.
    lifecycle.promote_due()  # the scheduler's move: due at once
    (again,) = claim(worker, "w-1", queue="email_jobs")
    assert again["attempts"] == 1
    body = post(worker, "/workers/nack", {"worker_id": "w-1", "task_id": again["id"], "error": "boom"}).json()
    assert (body["status"], body["attempts"]) == ("dead", 1)


def test_a_release_in_a_batch_keeps_the_last_real_error(producer, worker, queue):
    task = leased(worker, producer)
    post(
        worker,
        "/workers/nack",
        {"worker_id": "w-1", "task_id": task["id"], "error": "first try failed", "retry_after_seconds": 0},
    )
    lifecycle.promote_due()
    (again,) = claim(worker, "w-1", queue="email_jobs")
    items = [{"task_id": again["id"], "lease_token": again["lease_token"], "error": "handed back", "release": True}]
    [result] = post(worker, "/workers/nack/batch", {"worker_id": "w-1", "items": items}).json()["results"]
    assert result["status"] == "retry"
    stored = Task.objects.get(pk=task["id"])
    assert (stored.attempts, stored.last_error) == (1, "first try failed")


@pytest.mark.parametrize("path", ["/workers/heartbeat", "/workers/ack", "/workers/nack"])
def test_with_lease_tokens_required_a_call_without_one_is_400_and_changes_nothing(
    producer, worker, queue, settings, path
):
    settings.TASKFORGE_REQUIRE_LEASE_TOKEN = True
    task = leased(worker, producer)
    body = {"worker_id": "w-1", "task_id": task["id"], "error": "x"} if path.endswith("nack") else {
        "worker_id": "w-1", "task_id": task["id"]}  # fmt: skip
    for missing in ({}, {"lease_token": None}):
        assert_error(post(worker, path, {**body, **missing}), 400, "validation_error", fields=["lease_token"])
    assert Task.objects.get(pk=task["id"]).status == Status.CLAIMED
    assert post(worker, path, {**body, "lease_token": task["lease_token"]}).status_code == 200


def test_with_lease_tokens_required_each_batch_item_needs_one(producer, worker, queue, settings):
    settings.TASKFORGE_REQUIRE_LEASE_TOKEN = True
    task = leased(worker, producer)
    items = [{"task_id": task["id"]}]
    assert_error(post(worker, "/workers/ack/batch", {"worker_id": "w-1", "items": items}), 400, "validation_error")
    assert Task.objects.get(pk=task["id"]).status == Status.CLAIMED
    items = [{"task_id": task["id"], "lease_token": task["lease_token"]}]
    [result] = post(worker, "/workers/ack/batch", {"worker_id": "w-1", "items": items}).json()["results"]
    assert result["status"] == "done"


def test_nack_error_may_be_long(producer, worker, queue):
    task = leased(worker, producer)
    error = "e" * 65536
    body = post(worker, "/workers/nack", {"worker_id": "w-1", "task_id": task["id"], "error": error}).json()
    assert body["last_error"] == error


def test_nack_unknown_task_is_404(worker, queue):
    body = {"worker_id": "w-1", "task_id": str(uuid.uuid4()), "error": "x"}
    assert_error(post(worker, "/workers/nack", body), 404, "not_found")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"error": ""}, "error"),
        ({"error": "e" * 65537}, "error"),
        ({"error": None}, "error"),
        ({"retry": "false"}, "retry"),
        ({"retry_after_seconds": -1}, "retry_after_seconds"),
        ({"retry_after_seconds": 2_592_001}, "retry_after_seconds"),
        ({"retry_after_seconds": 1.5}, "retry_after_seconds"),
        ({"task_id": "nope"}, "task_id"),
        ({"task_id": 12}, "task_id"),
        ({"worker_id": ""}, "worker_id"),
        ({"release": "true"}, "release"),
        ({"release": True, "retry": False}, "release"),
    ],
)
def test_nack_validation(producer, worker, queue, change, field):
    task = leased(worker, producer)
    body = {"worker_id": "w-1", "task_id": task["id"], "error": "x", **change}
    before = counts()
    assert_error(post(worker, "/workers/nack", body), 400, "validation_error", fields=[field])
    assert counts() == before
    assert Task.objects.get(pk=task["id"]).status == Status.CLAIMED


def test_nack_without_error_is_400(producer, worker, queue):
    task = leased(worker, producer)
    assert_error(post(worker, "/workers/nack", {"worker_id": "w-1", "task_id": task["id"]}), 400, fields=["error"])


# --- batch forms ---------------------------------------------------------------------------------


def test_ack_batch_judges_each_item_alone(producer, worker, queue):
    for n in range(3):
        enqueue(producer, payload={"n": n})
    a, b, c = claim(worker, queue="email_jobs", max_tasks=3)
    missing = str(uuid.uuid4())
    items = [
        {"task_id": a["id"], "lease_token": a["lease_token"], "result": {"n": 0}},
        {"task_id": missing},
        {"task_id": b["id"], "lease_token": "f" * 32},
        {"task_id": c["id"]},
    ]
    response = post(worker, "/workers/ack/batch", {"worker_id": "w-1", "items": items})
    assert response.status_code == 200
    results = response.json()["results"]
    assert results[0] == {"task_id": a["id"], "status": "done"}
    assert results[1]["task_id"] == missing
    assert results[1]["error"]["code"] == "not_found" and results[1]["error"]["message"]
    assert results[2]["task_id"] == b["id"]
    assert results[2]["error"]["code"] == "lease_lost"
    assert results[3] == {"task_id": c["id"], "status": "done"}
    statuses = dict(Task.objects.values_list("id", "status"))
    assert [statuses[uuid.UUID(t["id"])] for t in (a, b, c)] == ["done", "claimed", "done"]
    assert Task.objects.get(pk=a["id"]).result == {"n": 0}


def test_nack_batch_judges_each_item_alone(producer, worker, queue):
    for n in range(3):
        enqueue(producer, payload={"n": n})
    a, b, c = claim(worker, queue="email_jobs", max_tasks=3)
    items = [
        {"task_id": a["id"], "error": "retry me"},
        {"task_id": b["id"], "error": "give up", "retry": False},
        {"task_id": c["id"], "error": "not mine", "lease_token": "0" * 32},
        {"task_id": a["id"], "error": "twice"},
    ]
    response = post(worker, "/workers/nack/batch/", {"worker_id": "w-1", "items": items})
    assert response.status_code == 200
    results = response.json()["results"]
    assert results[0] == {"task_id": a["id"], "status": "retry"}
    assert results[1] == {"task_id": b["id"], "status": "dead"}
    assert results[2]["error"]["code"] == "lease_lost"
    assert len(results) == 4
    assert Task.objects.get(pk=a["id"]).last_error in ("retry me", "twice")
    assert DeadLetterTask.objects.filter(pk=b["id"]).exists()


@pytest.mark.parametrize("path", ["/workers/ack/batch", "/workers/nack/batch"])
@pytest.mark.parametrize("items", [[], "x", None], ids=["empty", "string", "null"])
def test_batch_item_count_and_shape(worker, queue, path, items):
    assert_error(post(worker, path, {"worker_id": "w-1", "items": items}), 400, fields=["items"])


@pytest.mark.parametrize("path", ["/workers/ack/batch", "/workers/nack/batch"])
def test_batch_over_100_items_is_400(worker, queue, path):
    items = [{"task_id": str(uuid.uuid4()), "error": "x"} for _ in range(101)]
    assert_error(post(worker, path, {"worker_id": "w-1", "items": items}), 400, fields=["items"])


def test_batch_bad_item_is_400_keyed_by_index(worker, queue):
    items = [{"task_id": str(uuid.uuid4()), "error": "x"}, {"task_id": "nope", "error": "x"}]
    assert_error(
        post(worker, "/workers/nack/batch", {"worker_id": "w-1", "items": items}), 400, fields=["items.1.task_id"]
    )


# --- GET /workers ---------------------------------------------------------------------------------


def listing(admin_api):
    response = admin_api.get("/workers")
    assert response.status_code == 200
    return {w["worker_id"]: w for w in response.json()["results"]}


def test_workers_listing(admin_api, producer, worker, queue):
    for n in range(3):
        enqueue(producer, payload={"n": n})
    a, b = claim(worker, "w-1", queue="email_jobs", max_tasks=2)
    post(worker, "/workers/heartbeat", {"worker_id": "w-1", "task_id": a["id"]})
    (c,) = claim(worker, "w-2", queue="email_jobs")
    post(worker, "/workers/ack", {"worker_id": "w-2", "task_id": c["id"]})
    claim(worker, "w-3", queue="email_jobs")
    workers = listing(admin_api)
    assert set(workers) == {"w-1", "w-2", "w-3"}
    w1 = workers["w-1"]
    assert set(w1) == {"worker_id", "last_seen_at", "last_heartbeat_at", "current_tasks", "stale"}
    assert sorted(w1["current_tasks"]) == sorted([a["id"], b["id"]])
    assert w1["stale"] is False
    assert w1["last_heartbeat_at"] is not None
    assert workers["w-2"]["current_tasks"] == []
    assert workers["w-3"] == {**workers["w-3"], "current_tasks": [], "stale": False, "last_heartbeat_at": None}


def set_worker(worker_id, **times):
    sets = ", ".join(f"{name} = now() - make_interval(secs => %s)" for name in times)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE tf_worker SET {sets} WHERE worker_id = %s", [*times.values(), worker_id])


def test_worker_is_stale_when_it_holds_tasks_without_recent_heartbeat(admin_api, producer, worker, queue, settings):
    timeout = settings.TASKFORGE_HEARTBEAT_TIMEOUT
    for n in range(2):
        enqueue(producer, payload={"n": n})
    (a,) = claim(worker, "w-1", queue="email_jobs")
    post(worker, "/workers/heartbeat", {"worker_id": "w-1", "task_id": a["id"]})
    claim(worker, "w-2", queue="email_jobs")
    # w-1's last heartbeat and claim are older than the timeout: stale.
    set_worker("w-1", last_heartbeat_at=timeout + 5, last_claim_at=timeout + 10)
    # w-2 never sent a heartbeat; its claim is what counts.
    set_worker("w-2", last_claim_at=timeout - 5)
    workers = listing(admin_api)
    assert workers["w-1"]["stale"] is True
    assert workers["w-2"]["stale"] is False
    set_worker("w-2", last_claim_at=timeout + 1)
    assert listing(admin_api)["w-2"]["stale"] is True


def test_idle_worker_is_never_stale(admin_api, worker, queue):
    claim(worker, "idle", queue="email_jobs")
    set_worker("idle", last_claim_at=3600, last_seen_at=300)
    assert listing(admin_api)["idle"]["stale"] is False


def test_workers_are_listed_for_ten_minutes(admin_api, worker, queue):
    claim(worker, "recent", queue="email_jobs")
    claim(worker, "gone", queue="email_jobs")
    set_worker("recent", last_seen_at=590)
    set_worker("gone", last_seen_at=610)
    assert set(listing(admin_api)) == {"recent"}
