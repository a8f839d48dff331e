"""Queue endpoints against API.md: create, list, read, update, delete, purge."""

from __future__ import annotations

from datetime import datetime

import pytest

from queues.models import Queue, Status, Task
from tests.contract import QUEUE_FIELDS
from tests.factories import QueueFactory, TaskFactory
from tests.integration.api.support import assert_error, counts, enqueue

pytestmark = pytest.mark.django_db

QUEUE_KEYS = set(QUEUE_FIELDS)


def create(client, **body):
    return client.post("/queues", body, format="json")


# --- create -------------------------------------------------------------------------


def test_create_queue_with_defaults(admin_api):
    response = create(admin_api, name="email_jobs")
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == QUEUE_KEYS
    assert body["name"] == "email_jobs"
    assert body["max_retries"] == 3
    assert body["rate_limit"] is None
    assert body["rate_burst"] is None
    assert body["paused"] is False
    assert body["retry_base_ms"] == 1000
    assert body["retry_max_delay_ms"] == 3_600_000
    datetime.fromisoformat(body["created_at"])
    datetime.fromisoformat(body["updated_at"])
    assert Queue.objects.get(name="email_jobs").max_retries == 3


def test_create_queue_with_every_field(admin_api):
    fields = {
        "name": "Reports-2026_x",
        "max_retries": 25,
        "rate_limit": 100_000,
        "rate_burst": 1,
        "paused": True,
        "retry_base_ms": 3_600_000,
        "retry_max_delay_ms": 30 * 86_400_000,
    }
    response = create(admin_api, **fields)
    assert response.status_code == 201, response.content
    body = response.json()
    assert {name: body[name] for name in fields} == fields
    assert admin_api.get("/queues/Reports-2026_x").json()["rate_burst"] == 1


def test_create_queue_name_taken_is_409(admin_api):
    assert create(admin_api, name="email_jobs").status_code == 201
    error = assert_error(create(admin_api, name="email_jobs", max_retries=1), 409, "conflict")
    assert "email_jobs" in error["message"]
    assert Queue.objects.get(name="email_jobs").max_retries == 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "a" * 65}, "name"),
        ({"name": "has space"}, "name"),
        ({"name": "dot.ted"}, "name"),
        ({"name": "émoji"}, "name"),
        ({"name": 5}, "name"),
        ({}, "name"),
        ({"name": "q", "max_retries": 26}, "max_retries"),
        ({"name": "q", "max_retries": -1}, "max_retries"),
        ({"name": "q", "rate_limit": 0}, "rate_limit"),
        ({"name": "q", "rate_limit": 100_001}, "rate_limit"),
        ({"name": "q", "rate_burst": 0}, "rate_burst"),
        ({"name": "q", "rate_burst": 100_001}, "rate_burst"),
        ({"name": "q", "paused": "yes"}, "paused"),
        ({"name": "q", "paused": 1}, "paused"),
        ({"name": "q", "retry_base_ms": 0}, "retry_base_ms"),
        ({"name": "q", "retry_base_ms": 3_600_001}, "retry_base_ms"),
        ({"name": "q", "retry_max_delay_ms": 30 * 86_400_000 + 1}, "retry_max_delay_ms"),
        ({"name": "q", "retry_base_ms": 5000, "retry_max_delay_ms": 4999}, "retry_max_delay_ms"),
        ({"name": "q", "retry_max_delay_ms": 999}, "retry_max_delay_ms"),  # below the default base (1 s)
    ],
)
def test_create_queue_validation(admin_api, body, field):
    before = counts()
    assert_error(create(admin_api, **body), 400, "validation_error", fields=[field])
    assert counts() == before


def test_max_delay_equal_to_base_is_accepted(admin_api):
    response = create(admin_api, name="q", retry_base_ms=5000, retry_max_delay_ms=5000)
    assert response.status_code == 201, response.content


# --- list and read --------------------------------------------------------------------


def test_list_queues(producer):
    QueueFactory(name="b_queue")
    QueueFactory(name="a_queue")
    response = producer.get("/queues")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"results"}
    assert [q["name"] for q in body["results"]] == ["a_queue", "b_queue"]
    assert all(set(q) == QUEUE_KEYS for q in body["results"])


def test_list_queues_empty(producer):
    assert producer.get("/queues").json() == {"results": []}


@pytest.mark.parametrize("path", ["/queues/email_jobs", "/queues/email_jobs/"])
def test_read_queue_with_or_without_trailing_slash(producer, queue, path):
    response = producer.get(path)
    assert response.status_code == 200  # answered directly, never a redirect
    assert response.json()["name"] == "email_jobs"


@pytest.mark.parametrize("name", ["nope", "a" * 65, "bad%20name", "x%00y"])
def test_read_unknown_queue_is_404(producer, name):
    assert_error(producer.get(f"/queues/{name}"), 404, "not_found")


# --- update -----------------------------------------------------------------------------


def test_patch_queue(admin_api, queue):
    response = admin_api.patch(
        "/queues/email_jobs", {"max_retries": 7, "rate_limit": 10, "paused": True}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["max_retries"], body["rate_limit"], body["paused"]) == (7, 10, True)
    queue.refresh_from_db()
    assert (queue.max_retries, queue.rate_limit, queue.paused) == (7, 10, True)
    cleared = admin_api.patch("/queues/email_jobs/", {"rate_limit": None}, format="json")
    assert cleared.status_code == 200
    assert cleared.json()["rate_limit"] is None


def test_patch_queue_name_cannot_change(admin_api, queue):
    assert_error(
        admin_api.patch("/queues/email_jobs", {"name": "other"}, format="json"),
        400,
        "validation_error",
        fields=["name"],
    )
    assert Queue.objects.filter(name="email_jobs").exists()
    assert not Queue.objects.filter(name="other").exists()


def test_patch_queue_max_delay_below_base_is_400_and_changes_nothing(admin_api, queue):
    response = admin_api.patch("/queues/email_jobs", {"retry_max_delay_ms": 999, "max_retries": 9}, format="json")
    assert_error(response, 400, "validation_error", fields=["retry_max_delay_ms"])
    queue.refresh_from_db()
    assert (queue.retry_max_delay_ms, queue.max_retries) == (3_600_000, 3)


@pytest.mark.parametrize(
    "body",
    [{"max_retries": "5"}, {"max_retries": 26}, {"paused": "true"}, {"status": "paused"}, {"rate_limit": 1.5}],
)
def test_patch_queue_validation(admin_api, queue, body):
    assert_error(admin_api.patch("/queues/email_jobs", body, format="json"), 400, "validation_error")
    queue.refresh_from_db()
    assert (queue.max_retries, queue.paused, queue.rate_limit) == (3, False, None)


def test_patch_unknown_queue_is_404(admin_api):
    assert_error(admin_api.patch("/queues/nope", {"paused": True}, format="json"), 404, "not_found")


def test_patch_max_retries_does_not_change_existing_tasks(admin_api, producer, queue):
    before = enqueue(producer)
    admin_api.patch("/queues/email_jobs", {"max_retries": 9}, format="json")
    after = enqueue(producer)
    assert Task.objects.get(pk=before["id"]).max_retries == 3
    assert after["max_retries"] == 9


# --- delete -------------------------------------------------------------------------------


def test_delete_empty_queue(admin_api, queue):
    response = admin_api.delete("/queues/email_jobs")
    assert response.status_code == 204
    assert response.content == b""
    assert not Queue.objects.filter(name="email_jobs").exists()
    assert_error(admin_api.get("/queues/email_jobs"), 404, "not_found")


def test_delete_queue_takes_finished_history_with_it(admin_api, producer, queue):
    TaskFactory(queue=queue, done=True)
    cancelled = enqueue(producer)
    assert producer.delete(f"/queues/email_jobs/tasks/{cancelled['id']}").status_code == 200
    other = TaskFactory(queue=QueueFactory(name="other"))
    assert admin_api.delete("/queues/email_jobs/").status_code == 204
    assert list(Task.objects.values_list("id", flat=True)) == [other.id]
    assert counts()["events"] == 0  # the cancelled task's history went with it


@pytest.mark.parametrize(
    "traits",
    [
        {"status": Status.PENDING},
        {"claimed": True},
        {"expired_lease": True},
        {"retry_due": True},
        {"dead": True},
    ],
    ids=["pending", "claimed", "executing", "retry", "dead"],
)
def test_delete_queue_with_live_tasks_is_409_with_count(admin_api, queue, traits):
    TaskFactory.create_batch(3, queue=queue, **traits)
    TaskFactory(queue=queue, done=True)
    error = assert_error(admin_api.delete("/queues/email_jobs"), 409, "conflict")
    assert "3 task" in error["message"]
    assert Queue.objects.filter(name="email_jobs").exists()
    assert Task.objects.filter(queue=queue).count() == 4


def test_delete_unknown_queue_is_404(admin_api):
    assert_error(admin_api.delete("/queues/nope"), 404, "not_found")


def test_queue_name_is_free_again_after_delete(admin_api, queue):
    assert admin_api.delete("/queues/email_jobs").status_code == 204
    assert create(admin_api, name="email_jobs").status_code == 201


# --- purge --------------------------------------------------------------------------------


def test_purge_cancels_pending_and_retry_only(admin_api, queue):
    pending = TaskFactory.create_batch(3, queue=queue)
    scheduled = TaskFactory(queue=queue, scheduled_at="2099-01-01T00:00:00Z")
    retry = TaskFactory(queue=queue, retry_due=True)
    claimed = TaskFactory(queue=queue, claimed=True)
    dead = TaskFactory(queue=queue, dead=True)
    done = TaskFactory(queue=queue, done=True)
    other_queue = TaskFactory(queue=QueueFactory(name="other"))

    response = admin_api.post("/queues/email_jobs/purge")
    assert response.status_code == 200
    assert response.json() == {"purged": 5}
    statuses = dict(Task.objects.values_list("id", "status"))
    for task in [*pending, scheduled, retry]:
        assert statuses[task.id] == Status.CANCELLED
    assert statuses[claimed.id] == Status.CLAIMED
    assert statuses[dead.id] == Status.DEAD
    assert statuses[done.id] == Status.DONE
    assert statuses[other_queue.id] == Status.PENDING
    assert Task.objects.filter(status=Status.CANCELLED, finished_at__isnull=True).count() == 0
    # Nothing is left to purge the second time.
    assert admin_api.post("/queues/email_jobs/purge/").json() == {"purged": 0}


def test_purge_unknown_queue_is_404(admin_api):
    assert_error(admin_api.post("/queues/nope/purge"), 404, "not_found")


# --- paused queues -------------------------------------------------------------------------


def test_paused_queue_accepts_tasks_but_dispatches_none(admin_api, producer, worker, queue):
    admin_api.patch("/queues/email_jobs", {"paused": True}, format="json")
    created = enqueue(producer)
    assert created["status"] == "pending"
    for body in ({"queue": "email_jobs"}, {}):
        response = worker.post("/workers/claim", {"worker_id": "w-1", **body}, format="json")
        assert response.json() == {"tasks": []}
    admin_api.patch("/queues/email_jobs", {"paused": False}, format="json")
    response = worker.post("/workers/claim", {"worker_id": "w-1", "queue": "email_jobs"}, format="json")
    assert [t["id"] for t in response.json()["tasks"]] == [created["id"]]
