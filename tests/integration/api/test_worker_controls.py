"""Worker controls: ``POST /workers/{worker_id}/quiet|stop|resume`` and what claims and heartbeats answer."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from queues.models import Status, Task
from tests.integration.api.support import assert_error, claim, enqueue, post
from workers import registry
from workers.models import Worker

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _every_call_writes_the_registry():  # type: ignore[no-untyped-def]
    registry.forget_writes()  # rows are rolled back between tests: the next call must write again


def control(admin_api, worker_id: str, action: str):  # type: ignore[no-untyped-def]
    return admin_api.post(f"/workers/{quote(worker_id, safe='')}/{action}", format="json")


def test_a_quiet_worker_is_answered_with_no_tasks_until_resumed(admin_api, producer, worker, queue):
    claim(worker, "w-quiet", queue="email_jobs")  # seen once, holding nothing
    task = enqueue(producer)
    told = control(admin_api, "w-quiet", "quiet")
    assert told.status_code == 200, told.content
    assert told.json()["worker_id"] == "w-quiet" and told.json()["control"] == "quiet"
    assert told.json()["control_at"]

    answer = post(worker, "/workers/claim", {"worker_id": "w-quiet", "queue": "email_jobs", "wait_seconds": 5})
    assert answer.status_code == 200
    assert answer.json() == {"tasks": [], "control": "quiet"}  # at once: a quiet worker is not made to wait
    assert Task.objects.get(pk=task["id"]).status == Status.PENDING
    # Other workers are not affected.
    assert [t["id"] for t in claim(worker, "w-other", queue="email_jobs")] == [task["id"]]

    resumed = control(admin_api, "w-quiet", "resume")
    assert resumed.status_code == 200 and "control" not in resumed.json()
    enqueue(producer)
    answer = post(worker, "/workers/claim", {"worker_id": "w-quiet", "queue": "email_jobs"})
    assert len(answer.json()["tasks"]) == 1 and "control" not in answer.json()


def test_a_worker_told_to_stop_still_heartbeats_and_acks_what_it_holds(admin_api, producer, worker, queue):
    enqueue(producer)
    (held,) = claim(worker, "w-stop", queue="email_jobs")
    assert control(admin_api, "w-stop", "stop").json()["control"] == "stop"
    beat = post(
        worker, "/workers/heartbeat", {"worker_id": "w-stop", "task_id": held["id"], "lease_token": held["lease_token"]}
    )
    assert beat.status_code == 200 and beat.json()["control"] == "stop"
    assert claim(worker, "w-stop", queue="email_jobs") == []
    acked = post(
        worker, "/workers/ack", {"worker_id": "w-stop", "task_id": held["id"], "lease_token": held["lease_token"]}
    )
    assert acked.status_code == 200 and acked.json()["status"] == "done"
    [listed] = [w for w in admin_api.get("/workers").json()["results"] if w["worker_id"] == "w-stop"]
    assert listed["control"] == "stop" and listed["current_tasks"] == []


def test_answers_without_a_control_are_as_the_contract_shows_them(admin_api, producer, worker, queue):
    enqueue(producer)
    (held,) = claim(worker, "w-plain", queue="email_jobs")
    beat = post(
        worker,
        "/workers/heartbeat",
        {"worker_id": "w-plain", "task_id": held["id"], "lease_token": held["lease_token"]},
    )
    assert set(beat.json()) == {"task_id", "status", "lease_expires_at", "cancel_requested"}
    assert set(post(worker, "/workers/claim", {"worker_id": "w-plain"}).json()) == {"tasks"}
    [listed] = admin_api.get("/workers").json()["results"]
    assert set(listed) == {"worker_id", "last_seen_at", "last_heartbeat_at", "current_tasks", "stale"}


def test_a_worker_id_with_a_slash_is_controlled_percent_encoded(admin_api, worker, queue):
    claim(worker, "pod/web-1", queue="email_jobs")
    assert control(admin_api, "pod/web-1", "quiet").json()["control"] == "quiet"
    assert Worker.objects.get(pk="pod/web-1").control == "quiet"


def test_the_registry_keeps_the_caller_s_address_and_user_agent(worker, queue):
    post(worker, "/workers/claim", {"worker_id": "w-agent"})  # the test client sends no User-Agent
    assert Worker.objects.get(pk="w-agent").agent is None
    registry.forget_writes()
    worker.post("/workers/claim", {"worker_id": "w-agent"}, format="json", HTTP_USER_AGENT="my-worker/2.1 (go)")
    seen = Worker.objects.get(pk="w-agent")
    assert (seen.address, seen.agent) == ("127.0.0.1", "my-worker/2.1 (go)")


def test_refusals(client, producer, worker, admin_api, queue):
    claim(worker, "w-1", queue="email_jobs")
    assert_error(control(admin_api, "never-seen", "quiet"), 404, "not_found")
    assert_error(control(producer, "w-1", "quiet"), 403)
    assert_error(control(worker, "w-1", "stop"), 403)
    assert_error(client.post("/workers/w-1/quiet", content_type="application/json"), 401)
    assert_error(admin_api.get("/workers/w-1/quiet"), 405)
    assert_error(control(admin_api, "w-1", "pause"), 404)  # not an action: no such path
    assert Worker.objects.get(pk="w-1").control is None
