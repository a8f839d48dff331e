"""The dead-letter queue against API.md: listing, replay (single and bulk), discard."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from queues import lifecycle
from queues.models import DeadLetterTask, Status, Task, TaskEvent
from tests.factories import QueueFactory, TaskFactory
from tests.integration.api.support import assert_error, claim, counts, enqueue, post

pytestmark = pytest.mark.django_db

ENTRY_KEYS = {"id", "queue", "payload", "last_error", "attempts", "died_at", "replayed_at", "replay_count"}


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value)


def kill(worker, producer, error="boom", **enqueue_body):
    """A task that really died through the protocol (nack with retry=false)."""
    created = enqueue(producer, **enqueue_body)
    (task,) = claim(worker, queue="email_jobs")
    assert task["id"] == created["id"]
    body = {"worker_id": "w-1", "task_id": task["id"], "error": error, "retry": False}
    assert post(worker, "/workers/nack", body).json()["status"] == "dead"
    return created


def dlq(admin_api, query="", name="email_jobs"):
    response = admin_api.get(f"/queues/{name}/dlq{query}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"results", "next"}
    return body


# --- listing ---------------------------------------------------------------------------------


def test_dlq_entry_shape(admin_api, producer, worker, queue):
    created = kill(worker, producer, error="bad input", payload={"user_id": "abc123"})
    (entry,) = dlq(admin_api)["results"]
    assert set(entry) == ENTRY_KEYS
    assert entry["id"] == created["id"]
    assert entry["queue"] == "email_jobs"
    assert entry["payload"] == {"user_id": "abc123"}
    assert (entry["last_error"], entry["attempts"], entry["replay_count"]) == ("bad input", 1, 0)
    assert entry["replayed_at"] is None
    assert ts(entry["died_at"]) <= timezone.now()
    assert admin_api.get("/queues/email_jobs/dlq/").json()["results"] == [entry]


def test_dlq_lists_only_this_queues_dead_tasks_newest_first(admin_api, queue):
    now = timezone.now()
    older = TaskFactory(queue=queue, dead=True, dead_letter__died_at=now - timedelta(minutes=5))
    newer = TaskFactory(queue=queue, dead=True, dead_letter__died_at=now - timedelta(minutes=1))
    TaskFactory(queue=QueueFactory(name="other"), dead=True)
    TaskFactory(queue=queue)  # alive
    assert [e["id"] for e in dlq(admin_api)["results"]] == [str(newer.id), str(older.id)]


def test_dlq_filters_and_include_replayed(admin_api, queue):
    now = timezone.now()
    old = TaskFactory(queue=queue, dead=True, dead_letter__died_at=now - timedelta(hours=3))
    mid = TaskFactory(queue=queue, dead=True, dead_letter__died_at=now - timedelta(hours=2))
    new = TaskFactory(queue=queue, dead=True, dead_letter__died_at=now - timedelta(hours=1))
    lifecycle.replay(queue, mid.id)

    def ids(query):
        return [e["id"] for e in dlq(admin_api, query)["results"]]

    assert ids("") == [str(new.id), str(old.id)]
    assert ids("?include_replayed=true") == [str(new.id), str(mid.id), str(old.id)]
    assert ids("?include_replayed=false") == [str(new.id), str(old.id)]
    after = (now - timedelta(minutes=150)).isoformat().replace("+00:00", "Z")
    before = (now - timedelta(minutes=90)).isoformat().replace("+00:00", "Z")
    assert ids(f"?died_after={after}") == [str(new.id)]
    assert ids(f"?died_after={after}&include_replayed=true") == [str(new.id), str(mid.id)]
    assert ids(f"?died_before={before}") == [str(old.id)]
    assert ids(f"?died_after={after}&died_before={before}&include_replayed=true") == [str(mid.id)]


def test_dlq_pagination_walks_everything_once(admin_api, queue):
    died_at = timezone.now()
    # Shared died_at values force the cursor to break ties by id.
    for n in range(13):
        TaskFactory(queue=queue, dead=True, dead_letter__died_at=died_at - timedelta(seconds=n % 3))
    seen, query, pages = [], "?limit=4", 0
    while True:
        body = dlq(admin_api, query)
        pages += 1
        seen.extend(e["id"] for e in body["results"])
        if not body["next"]:
            break
        query = f"?limit=4&cursor={body['next']}"
    assert pages == 4
    assert len(seen) == len(set(seen)) == 13
    died = [DeadLetterTask.objects.get(pk=pk).died_at for pk in seen]
    assert died == sorted(died, reverse=True)


def test_dlq_unknown_queue_is_404(admin_api):
    assert_error(admin_api.get("/queues/nope/dlq"), 404, "not_found")


# --- replay ------------------------------------------------------------------------------------


def test_replay_puts_the_same_task_back_to_pending(admin_api, producer, worker, queue):
    created = kill(worker, producer)
    response = admin_api.post(f"/queues/email_jobs/dlq/{created['id']}/replay")
    assert response.status_code == 200, response.content
    task = response.json()
    assert task["id"] == created["id"]
    assert (task["status"], task["attempts"]) == ("pending", 0)
    assert task["claimed_by"] is None
    assert ts(task["scheduled_at"]) == ts(task["updated_at"])  # now
    entry = DeadLetterTask.objects.get(pk=created["id"])
    assert entry.replayed_at is not None and entry.replay_count == 1
    assert dlq(admin_api)["results"] == []
    (listed,) = dlq(admin_api, "?include_replayed=true")["results"]
    assert (listed["replay_count"], listed["replayed_at"] is not None) == (1, True)
    history = TaskEvent.objects.filter(task_id=created["id"]).order_by("id").last()
    assert (history.from_status, history.to_status) == ("dead", "pending")
    # And it can be claimed again, with a fresh attempt budget.
    (again,) = claim(worker, queue="email_jobs")
    assert (again["id"], again["attempts"]) == (created["id"], 1)


def test_second_death_shows_again_and_keeps_replay_count(admin_api, producer, worker, queue):
    created = kill(worker, producer, error="first")
    first_death = DeadLetterTask.objects.get(pk=created["id"]).died_at
    DeadLetterTask.objects.filter(pk=created["id"]).update(died_at=first_death - timedelta(minutes=1))
    admin_api.post(f"/queues/email_jobs/dlq/{created['id']}/replay")
    (task,) = claim(worker, queue="email_jobs")
    post(worker, "/workers/nack", {"worker_id": "w-1", "task_id": task["id"], "error": "second", "retry": False})
    (entry,) = dlq(admin_api)["results"]
    assert entry["id"] == created["id"]
    assert (entry["last_error"], entry["attempts"], entry["replay_count"]) == ("second", 1, 1)
    assert ts(entry["died_at"]) > first_death - timedelta(minutes=1)
    assert entry["replayed_at"] is not None
    assert DeadLetterTask.objects.count() == 1


def test_replay_of_a_replayed_task_is_409(admin_api, producer, worker, queue):
    created = kill(worker, producer)
    assert admin_api.post(f"/queues/email_jobs/dlq/{created['id']}/replay/").status_code == 200
    before = counts()
    assert_error(admin_api.post(f"/queues/email_jobs/dlq/{created['id']}/replay"), 409, "conflict")
    assert counts() == before
    assert DeadLetterTask.objects.get(pk=created["id"]).replay_count == 1


def test_replay_of_a_task_that_never_died_is_404(admin_api, producer, queue):
    alive = enqueue(producer)
    assert_error(admin_api.post(f"/queues/email_jobs/dlq/{alive['id']}/replay"), 404, "not_found")
    assert_error(admin_api.post(f"/queues/email_jobs/dlq/{uuid.uuid4()}/replay"), 404, "not_found")
    assert_error(admin_api.post("/queues/email_jobs/dlq/not-a-uuid/replay"), 404, "not_found")
    assert Task.objects.get(pk=alive["id"]).status == Status.PENDING


def test_replay_through_another_queue_is_404(admin_api, queue):
    dead = TaskFactory(queue=QueueFactory(name="other"), dead=True)
    assert_error(admin_api.post(f"/queues/email_jobs/dlq/{dead.id}/replay"), 404, "not_found")
    assert_error(admin_api.post(f"/queues/nope/dlq/{dead.id}/replay"), 404, "not_found")
    assert Task.objects.get(pk=dead.id).status == Status.DEAD


# --- bulk replay ----------------------------------------------------------------------------------


def test_bulk_replay_by_ids_skips_tasks_that_are_not_dead(admin_api, queue):
    dead = TaskFactory.create_batch(3, queue=queue, dead=True)
    alive = TaskFactory(queue=queue)
    replayed = TaskFactory(queue=queue, dead=True)
    lifecycle.replay(queue, replayed.id)
    foreign = TaskFactory(queue=QueueFactory(name="other"), dead=True)
    ids = [str(t.id) for t in (dead[0], dead[1], alive, replayed, foreign)] + [str(uuid.uuid4())]
    response = post(admin_api, "/queues/email_jobs/dlq/replay", {"ids": ids})
    assert response.status_code == 200
    assert response.json() == {"replayed": 2}
    statuses = dict(Task.objects.values_list("id", "status"))
    assert (statuses[dead[0].id], statuses[dead[1].id], statuses[dead[2].id]) == ("pending", "pending", "dead")
    assert statuses[foreign.id] == "dead"
    assert Task.objects.get(pk=dead[0].id).attempts == 0


def test_bulk_replay_all(admin_api, queue):
    TaskFactory.create_batch(5, queue=queue, dead=True)
    TaskFactory(queue=QueueFactory(name="other"), dead=True)
    response = post(admin_api, "/queues/email_jobs/dlq/replay/", {"all": True})
    assert response.json() == {"replayed": 5}
    assert Task.objects.filter(queue=queue, status=Status.PENDING).count() == 5
    assert Task.objects.filter(status=Status.DEAD).count() == 1
    assert post(admin_api, "/queues/email_jobs/dlq/replay", {"all": True}).json() == {"replayed": 0}


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"ids": []},
        {"all": False},
        {"ids": ["00000000-0000-0000-0000-000000000001"], "all": True},
        {"ids": ["00000000-0000-0000-0000-000000000001"], "all": False},
        {"ids": ["nope"]},
        {"ids": "00000000-0000-0000-0000-000000000001"},
        {"all": "true"},
        {"ids": [str(uuid.UUID(int=n)) for n in range(1001)]},
        {"all": True, "extra": 1},
    ],
)
def test_bulk_replay_validation(admin_api, queue, body):
    TaskFactory(queue=queue, dead=True)
    before = counts()
    assert_error(post(admin_api, "/queues/email_jobs/dlq/replay", body), 400, "validation_error")
    assert counts() == before
    assert Task.objects.filter(status=Status.DEAD).count() == 1


def test_bulk_replay_unknown_queue_is_404(admin_api):
    assert_error(post(admin_api, "/queues/nope/dlq/replay", {"all": True}), 404, "not_found")


# --- discard ----------------------------------------------------------------------------------------


def test_discard_removes_the_entry_and_the_task(admin_api, producer, worker, queue):
    created = kill(worker, producer)
    response = admin_api.delete(f"/queues/email_jobs/dlq/{created['id']}")
    assert response.status_code == 204
    assert response.content == b""
    assert not Task.objects.filter(pk=created["id"]).exists()
    assert not DeadLetterTask.objects.filter(pk=created["id"]).exists()
    assert not TaskEvent.objects.filter(task_id=created["id"]).exists()
    assert_error(admin_api.delete(f"/queues/email_jobs/dlq/{created['id']}/"), 404, "not_found")
    assert_error(admin_api.get(f"/queues/email_jobs/tasks/{created['id']}"), 404, "not_found")


def test_discard_frees_the_idempotency_key(admin_api, producer, worker, queue):
    created = kill(worker, producer, idempotency_key="k")
    admin_api.delete(f"/queues/email_jobs/dlq/{created['id']}")
    assert (
        post(
            producer, "/queues/email_jobs/tasks", {"payload": {"user_id": "abc123"}, "idempotency_key": "k"}
        ).status_code
        == 201
    )


def test_discard_of_a_replayed_task_is_409(admin_api, queue):
    task = TaskFactory(queue=queue, dead=True)
    lifecycle.replay(queue, task.id)
    before = counts()
    assert_error(admin_api.delete(f"/queues/email_jobs/dlq/{task.id}"), 409, "conflict")
    assert counts() == before


def test_discard_of_a_task_that_never_died_is_404(admin_api, queue):
    alive = TaskFactory(queue=queue)
    assert_error(admin_api.delete(f"/queues/email_jobs/dlq/{alive.id}"), 404, "not_found")
    assert_error(admin_api.delete("/queues/email_jobs/dlq/xyz"), 404, "not_found")
    other = TaskFactory(queue=QueueFactory(name="other"), dead=True)
    assert_error(admin_api.delete(f"/queues/email_jobs/dlq/{other.id}"), 404, "not_found")
    assert Task.objects.filter(pk__in=[alive.id, other.id]).count() == 2
