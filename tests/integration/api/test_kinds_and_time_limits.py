"""Task kinds and time limits (API.md "Additions (v2)"): the fields, their bad input, the filters, the roles."""

from __future__ import annotations

import pytest

from queues.models import Queue, Task
from tests.factories import QueueFactory, TaskFactory
from tests.integration.api.support import assert_error, counts, enqueue, post

pytestmark = pytest.mark.django_db


# --- kind on enqueue -------------------------------------------------------------------------


def test_kind_is_stored_and_answered(producer, queue):
    body = enqueue(producer, kind="emails.send_welcome:v2-a_b")
    assert body["kind"] == "emails.send_welcome:v2-a_b"
    assert Task.objects.get(pk=body["id"]).kind == "emails.send_welcome:v2-a_b"
    read = producer.get(f"/queues/email_jobs/tasks/{body['id']}").json()
    assert read["kind"] == "emails.send_welcome:v2-a_b"


def test_kind_is_null_when_not_given(producer, queue):
    assert enqueue(producer)["kind"] is None
    assert enqueue(producer, kind=None)["kind"] is None


def test_kind_of_128_characters_is_accepted(producer, queue):
    assert enqueue(producer, kind="k" * 128)["kind"] == "k" * 128


@pytest.mark.parametrize(
    "kind",
    ["", "k" * 129, "has space", "emails/send", "émails", 5, 5.5, True, ["a"], {"a": 1}],
    ids=["empty", "129", "space", "slash", "non-ascii", "int", "float", "bool", "list", "object"],
)
def test_bad_kind_is_400_and_stores_nothing(producer, queue, kind):
    before = counts()
    assert_error(post(producer, "/queues/email_jobs/tasks", {"payload": {}, "kind": kind}), 400, fields=["kind"])
    assert counts() == before


def test_batch_takes_kind_per_item_and_names_a_bad_one_by_index(producer, queue):
    response = post(
        producer, "/queues/email_jobs/tasks/batch", {"tasks": [{"payload": {}, "kind": "a.b"}, {"payload": {}}]}
    )
    assert response.status_code == 201, response.content
    assert [t["kind"] for t in response.json()["tasks"]] == ["a.b", None]
    before = counts()
    bad = {"tasks": [{"payload": {}, "kind": "ok"}, {"payload": {}, "kind": "not ok"}]}
    assert_error(post(producer, "/queues/email_jobs/tasks/batch", bad), 400, fields=["1.kind"])
    assert counts() == before


def test_an_idempotent_replay_with_another_kind_is_a_conflict(producer, queue):
    enqueue(producer, idempotency_key="k-1", kind="a")
    assert_error(
        post(producer, "/queues/email_jobs/tasks", {"payload": {"user_id": "abc123"}, "idempotency_key": "k-1"}),
        409,
        "conflict",
    )


# --- the kind filter -------------------------------------------------------------------------


def test_task_list_filters_on_kind(producer, queue):
    sends = [TaskFactory(queue=queue, kind="emails.send") for _ in range(2)]
    TaskFactory(queue=queue, kind="emails.other")
    TaskFactory(queue=queue)
    TaskFactory(queue=QueueFactory(name="other"), kind="emails.send")
    body = producer.get("/queues/email_jobs/tasks?kind=emails.send").json()
    assert sorted(t["id"] for t in body["results"]) == sorted(str(t.id) for t in sends)
    assert all(t["kind"] == "emails.send" for t in body["results"])
    assert producer.get("/queues/email_jobs/tasks?kind=nothing.of.this").json()["results"] == []
    both = producer.get("/queues/email_jobs/tasks?kind=emails.send&status=pending&limit=1").json()
    assert len(both["results"]) == 1 and both["next"]


def test_dlq_list_filters_on_kind(admin_api, queue):
    dead = TaskFactory(queue=queue, dead=True, kind="reports.nightly")
    TaskFactory(queue=queue, dead=True, kind="reports.weekly")
    TaskFactory(queue=queue, dead=True)
    body = admin_api.get("/queues/email_jobs/dlq?kind=reports.nightly").json()
    assert [entry["id"] for entry in body["results"]] == [str(dead.id)]


@pytest.mark.parametrize("path", ["/queues/email_jobs/tasks", "/queues/email_jobs/dlq"])
@pytest.mark.parametrize("value", ["", "has%20space", "a/b", "k" * 129], ids=["empty", "space", "slash", "129"])
def test_malformed_kind_filter_is_400(admin_api, queue, path, value):
    assert_error(admin_api.get(f"{path}?kind={value}"), 400, fields=["kind"])


# --- timeout_seconds on queues ---------------------------------------------------------------


def test_queue_timeout_defaults_to_null_and_can_be_set_changed_and_cleared(admin_api):
    created = post(admin_api, "/queues", {"name": "reports"})
    assert created.status_code == 201 and created.json()["timeout_seconds"] is None
    created = post(admin_api, "/queues", {"name": "limited", "timeout_seconds": 86400})
    assert created.status_code == 201 and created.json()["timeout_seconds"] == 86400
    patched = admin_api.patch("/queues/limited", {"timeout_seconds": 1}, format="json")
    assert patched.status_code == 200 and patched.json()["timeout_seconds"] == 1
    assert Queue.objects.get(name="limited").timeout_seconds == 1
    assert admin_api.get("/queues/limited").json()["timeout_seconds"] == 1
    cleared = admin_api.patch("/queues/limited", {"timeout_seconds": None}, format="json")
    assert cleared.status_code == 200 and cleared.json()["timeout_seconds"] is None
    # A PATCH of another field leaves it alone.
    admin_api.patch("/queues/limited", {"timeout_seconds": 30}, format="json")
    assert admin_api.patch("/queues/limited", {"paused": True}, format="json").json()["timeout_seconds"] == 30


BAD_TIMEOUTS = [0, -1, 86401, "30", 30.5, True, [30], {"s": 30}]
BAD_TIMEOUT_IDS = ["0", "negative", "86401", "string", "float", "bool", "list", "object"]


@pytest.mark.parametrize("value", BAD_TIMEOUTS, ids=BAD_TIMEOUT_IDS)
def test_bad_queue_timeout_is_400_and_changes_nothing(admin_api, queue, value):
    before = counts()
    assert_error(post(admin_api, "/queues", {"name": "q2", "timeout_seconds": value}), 400, fields=["timeout_seconds"])
    response = admin_api.patch("/queues/email_jobs", {"timeout_seconds": value}, format="json")
    assert_error(response, 400, fields=["timeout_seconds"])
    assert counts() == before
    assert Queue.objects.get(name="email_jobs").timeout_seconds is None


# --- timeout_seconds on enqueue --------------------------------------------------------------


def test_task_takes_the_queues_timeout_at_enqueue_unless_given(producer, admin_api, queue):
    assert enqueue(producer)["timeout_seconds"] is None
    admin_api.patch("/queues/email_jobs", {"timeout_seconds": 120}, format="json")
    inherited = enqueue(producer)
    assert inherited["timeout_seconds"] == 120
    assert enqueue(producer, timeout_seconds=5)["timeout_seconds"] == 5
    assert enqueue(producer, timeout_seconds=None)["timeout_seconds"] == 120
    # Like max_retries, the value is the queue's at enqueue time: a later change leaves the task alone.
    admin_api.patch("/queues/email_jobs", {"timeout_seconds": 600}, format="json")
    assert producer.get(f"/queues/email_jobs/tasks/{inherited['id']}").json()["timeout_seconds"] == 120


def test_batch_items_take_their_own_timeout(producer, queue):
    body = {"tasks": [{"payload": {}, "timeout_seconds": 7}, {"payload": {}}]}
    response = post(producer, "/queues/email_jobs/tasks/batch", body)
    assert [t["timeout_seconds"] for t in response.json()["tasks"]] == [7, None]
    before = counts()
    bad = {"tasks": [{"payload": {}}, {"payload": {}, "timeout_seconds": 0}]}
    assert_error(post(producer, "/queues/email_jobs/tasks/batch", bad), 400, fields=["1.timeout_seconds"])
    assert counts() == before


@pytest.mark.parametrize("value", BAD_TIMEOUTS, ids=BAD_TIMEOUT_IDS)
def test_bad_enqueue_timeout_is_400_and_stores_nothing(producer, queue, value):
    before = counts()
    body = {"payload": {}, "timeout_seconds": value}
    assert_error(post(producer, "/queues/email_jobs/tasks", body), 400, fields=["timeout_seconds"])
    assert counts() == before


# --- roles -----------------------------------------------------------------------------------


def test_roles_for_the_new_fields(producer, worker, admin_api, queue):
    body = {"payload": {}, "kind": "a", "timeout_seconds": 5}
    assert_error(post(worker, "/queues/email_jobs/tasks", body), 403, "forbidden")
    assert post(producer, "/queues/email_jobs/tasks", body).status_code == 201
    assert post(admin_api, "/queues/email_jobs/tasks", body).status_code == 201
    assert_error(worker.get("/queues/email_jobs/tasks?kind=a"), 403, "forbidden")
    assert producer.get("/queues/email_jobs/tasks?kind=a").status_code == 200
    assert_error(producer.get("/queues/email_jobs/dlq?kind=a"), 403, "forbidden")
    for client in (producer, worker):
        response = client.patch("/queues/email_jobs", {"timeout_seconds": 5}, format="json")
        assert_error(response, 403, "forbidden")
        assert_error(post(client, "/queues", {"name": "q3", "timeout_seconds": 5}), 403, "forbidden")
    assert Queue.objects.get(name="email_jobs").timeout_seconds is None
