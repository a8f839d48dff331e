"""Cancelling running tasks and reporting progress (API.md "Additions (v2)"), through the API."""

from __future__ import annotations

import orjson
import pytest

from queues.models import DeadLetterTask, Status, Task, TaskEvent
from tests.contract import TASK_FIELDS
from tests.factories import TaskFactory
from tests.integration.api.support import assert_error, claim, counts, enqueue, post

pytestmark = pytest.mark.django_db


def _running(producer, worker, *, beat: bool = False, **enqueue_body) -> tuple[dict, dict]:
    created = enqueue(producer, **enqueue_body)
    (task,) = claim(worker, queue="email_jobs")
    lease = {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"]}
    if beat:
        assert post(worker, "/workers/heartbeat", lease).status_code == 200
    return created, lease


# --- cancel_requested ---------------------------------------------------------------------------


def test_every_task_object_says_cancel_requested_false_and_progress_null(producer, worker, queue):
    created = enqueue(producer)
    assert set(created) == set(TASK_FIELDS)
    assert (created["cancel_requested"], created["progress"]) == (False, None)
    (task,) = claim(worker, queue="email_jobs")
    assert (task["cancel_requested"], task["progress"]) == (False, None)
    listed = producer.get("/queues/email_jobs/tasks").json()["results"]
    assert [(t["cancel_requested"], t["progress"]) for t in listed] == [(False, None)]


@pytest.mark.parametrize("beat", [False, True], ids=["claimed", "executing"])
def test_cancelling_a_running_task_answers_202_and_heartbeats_say_so(producer, worker, queue, beat):
    created, lease = _running(producer, worker, beat=beat)
    response = producer.delete(f"/queues/email_jobs/tasks/{created['id']}")
    assert response.status_code == 202, response.content
    body = response.json()
    assert set(body) == set(TASK_FIELDS)
    assert body["status"] == ("executing" if beat else "claimed") and body["cancel_requested"] is True
    # Not a transition: the history is unchanged, the task still runs.
    assert [h["to_status"] for h in producer.get(f"/tasks/{created['id']}").json()["history"]][-1] == body["status"]
    for _ in range(2):  # from then on
        beat_answer = post(worker, "/workers/heartbeat", lease).json()
        assert beat_answer["cancel_requested"] is True and beat_answer["status"] == "executing"
    # Asking again is answered the same way and changes nothing.
    again = producer.delete(f"/queues/email_jobs/tasks/{created['id']}/")
    assert again.status_code == 202 and again.json()["cancel_requested"] is True


def test_heartbeats_of_an_untouched_task_say_cancel_requested_false(producer, worker, queue):
    _, lease = _running(producer, worker)
    assert post(worker, "/workers/heartbeat", lease).json()["cancel_requested"] is False


def test_a_nack_of_a_task_asked_to_stop_cancels_it_without_retry_or_dlq(producer, worker, queue):
    created, lease = _running(producer, worker, beat=True, max_retries=5)
    producer.delete(f"/queues/email_jobs/tasks/{created['id']}")
    nacked = post(worker, "/workers/nack", {**lease, "error": "stopped on request", "retry": True})
    assert nacked.status_code == 200, nacked.content
    body = nacked.json()
    assert (body["status"], body["last_error"]) == ("cancelled", "stopped on request")
    assert body["finished_at"] is not None
    assert not DeadLetterTask.objects.filter(pk=created["id"]).exists()
    history = producer.get(f"/tasks/{created['id']}").json()["history"]
    assert (history[-1]["from_status"], history[-1]["to_status"]) == ("executing", "cancelled")
    assert claim(worker, queue="email_jobs") == []  # never retried


def test_an_ack_of_a_task_asked_to_stop_still_makes_it_done(producer, worker, queue):
    created, lease = _running(producer, worker)
    producer.delete(f"/queues/email_jobs/tasks/{created['id']}")
    acked = post(worker, "/workers/ack", {**lease, "result": {"finished": "anyway"}})
    assert acked.status_code == 200
    assert (acked.json()["status"], acked.json()["result"]) == ("done", {"finished": "anyway"})
    assert acked.json()["cancel_requested"] is True  # it was asked; it finished first


def test_a_batch_nack_cancels_only_the_tasks_asked_to_stop(producer, worker, queue):
    stop = enqueue(producer)
    keep = enqueue(producer)
    tasks = {t["id"]: t for t in claim(worker, queue="email_jobs", max_tasks=2)}
    producer.delete(f"/queues/email_jobs/tasks/{stop['id']}")
    items = [{"task_id": i, "lease_token": t["lease_token"], "error": "x"} for i, t in tasks.items()]
    results = post(worker, "/workers/nack/batch", {"worker_id": "w-1", "items": items}).json()["results"]
    assert {r["task_id"]: r["status"] for r in results} == {stop["id"]: "cancelled", keep["id"]: "retry"}


def test_pending_and_retry_tasks_are_still_cancelled_at_once_with_200(producer, queue):
    for traits in ({}, {"retry_due": True}):
        task = TaskFactory(queue=queue, **traits)
        response = producer.delete(f"/queues/email_jobs/tasks/{task.id}")
        assert response.status_code == 200
        assert (response.json()["status"], response.json()["cancel_requested"]) == ("cancelled", False)


@pytest.mark.parametrize("traits", [{"done": True}, {"dead": True}, {"status": Status.CANCELLED}], ids=str)
def test_finished_tasks_are_still_409(producer, queue, traits):
    task = TaskFactory(queue=queue, **traits)
    before = counts()
    assert_error(producer.delete(f"/queues/email_jobs/tasks/{task.id}"), 409, "conflict")
    assert counts() == before
    assert Task.objects.get(pk=task.id).cancel_requested is False


def test_cancel_roles(client_for, queue):
    task = TaskFactory(queue=queue, claimed=True)
    assert_error(client_for("worker").delete(f"/queues/email_jobs/tasks/{task.id}"), 403, "forbidden")
    assert Task.objects.get(pk=task.id).cancel_requested is False
    assert client_for("admin").delete(f"/queues/email_jobs/tasks/{task.id}").status_code == 202
    other = TaskFactory(queue=queue, claimed=True)
    assert client_for("producer").delete(f"/queues/email_jobs/tasks/{other.id}").status_code == 202


# --- progress ------------------------------------------------------------------------------------


def test_heartbeat_progress_is_stored_and_the_latest_wins(producer, worker, queue):
    created, lease = _running(producer, worker)
    assert post(worker, "/workers/heartbeat", {**lease, "progress": {"done": 1, "of": 10}}).status_code == 200
    assert producer.get(f"/tasks/{created['id']}").json()["progress"] == {"done": 1, "of": 10}
    post(worker, "/workers/heartbeat", {**lease, "progress": {"done": 7, "of": 10, "note": "ünïcode"}})
    assert producer.get(f"/queues/email_jobs/tasks/{created['id']}").json()["progress"] == {
        "done": 7, "of": 10, "note": "ünïcode"
    }  # fmt: skip
    # A heartbeat without progress (or with null) keeps the last one; heartbeats are not history.
    post(worker, "/workers/heartbeat", lease)
    post(worker, "/workers/heartbeat", {**lease, "progress": None})
    assert Task.objects.get(pk=created["id"]).progress == {"done": 7, "of": 10, "note": "ünïcode"}
    acked = post(worker, "/workers/ack", lease).json()
    assert acked["progress"] == {"done": 7, "of": 10, "note": "ünïcode"}  # kept after the end


def test_progress_of_exactly_4_kib_is_accepted_and_one_byte_more_is_400(producer, worker, queue):
    created, lease = _running(producer, worker)
    filler = 4096 - len(orjson.dumps({"p": ""}))
    exact = {"p": "x" * filler}
    assert len(orjson.dumps(exact)) == 4096
    assert post(worker, "/workers/heartbeat", {**lease, "progress": exact}).status_code == 200
    over = {"p": "x" * (filler + 1)}
    assert_error(post(worker, "/workers/heartbeat", {**lease, "progress": over}), 400, fields=["progress"])
    assert Task.objects.get(pk=created["id"]).progress == exact


@pytest.mark.parametrize("value", [[1, 2], "half", 5, 0.5, True], ids=["list", "string", "int", "float", "bool"])
def test_progress_must_be_an_object(producer, worker, queue, value):
    created, lease = _running(producer, worker)
    before = TaskEvent.objects.count()
    assert_error(post(worker, "/workers/heartbeat", {**lease, "progress": value}), 400, fields=["progress"])
    task = Task.objects.get(pk=created["id"])
    assert (task.status, task.progress, TaskEvent.objects.count()) == ("claimed", None, before)


def test_progress_of_someone_elses_lease_is_refused_and_not_stored(producer, worker, queue):
    created, lease = _running(producer, worker)
    response = post(worker, "/workers/heartbeat", {**lease, "worker_id": "w-2", "progress": {"x": 1}})
    assert_error(response, 409, "lease_lost")
    assert Task.objects.get(pk=created["id"]).progress is None
    assert_error(post(producer, "/workers/heartbeat", {**lease, "progress": {"x": 1}}), 403, "forbidden")
