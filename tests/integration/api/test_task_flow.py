"""A task's whole life over HTTP: enqueue, claim, heartbeat, ack / nack, DLQ, replay."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def enqueue(producer, queue_name="email_jobs", **body):
    body.setdefault("payload", {"user_id": "abc123"})
    response = producer.post(f"/queues/{queue_name}/tasks", body, format="json")
    assert response.status_code in (200, 201), response.content
    return response.json()


def claim(worker, worker_id="w-1", **body):
    response = worker.post("/workers/claim", {"worker_id": worker_id, **body}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["tasks"]


def test_enqueue_claim_heartbeat_ack(queue, producer, worker):
    created = enqueue(producer, priority=3)
    assert created["status"] == "pending"
    assert created["queue"] == "email_jobs"
    assert created["max_retries"] == 3
    assert created["attempts"] == 0

    (task,) = claim(worker, queue="email_jobs")
    assert task["id"] == created["id"]
    assert task["status"] == "claimed"
    assert task["attempts"] == 1
    assert task["lease_token"] and task["lease_expires_at"]

    beat = worker.post(
        "/workers/heartbeat",
        {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"]},
        format="json",
    )
    assert beat.status_code == 200
    assert beat.json()["status"] == "executing"

    acked = worker.post(
        "/workers/ack",
        {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"], "result": {"ok": True}},
        format="json",
    )
    assert acked.status_code == 200
    assert acked.json()["status"] == "done"
    assert acked.json()["result"] == {"ok": True}

    detail = producer.get(f"/queues/email_jobs/tasks/{task['id']}").json()
    assert [(h["from_status"], h["to_status"]) for h in detail["history"]] == [
        (None, "pending"),
        ("pending", "claimed"),
        ("claimed", "executing"),
        ("executing", "done"),
    ]


def test_repeated_ack_is_idempotent(queue, producer, worker):
    enqueue(producer)
    (task,) = claim(worker)
    body = {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"]}
    first = worker.post("/workers/ack", body, format="json")
    second = worker.post("/workers/ack", body, format="json")
    assert first.status_code == second.status_code == 200
    assert first.json()["updated_at"] == second.json()["updated_at"]


def test_ack_by_another_worker_is_lease_lost(queue, producer, worker):
    enqueue(producer)
    (task,) = claim(worker)
    response = worker.post("/workers/ack", {"worker_id": "w-2", "task_id": task["id"]}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "lease_lost"


def test_nack_until_dead_then_replay(queue, producer, worker, admin_api):
    queue.max_retries = 1
    queue.retry_base_ms = 1
    queue.retry_max_delay_ms = 1
    queue.save()
    created = enqueue(producer)
    (task,) = claim(worker)
    first = worker.post(
        "/workers/nack",
        {"worker_id": "w-1", "task_id": task["id"], "error": "downstream timeout", "retry_after_seconds": 0},
        format="json",
    ).json()
    assert first["status"] == "retry"
    assert first["last_error"] == "downstream timeout"

    from queues import lifecycle

    assert len(lifecycle.promote_due()) == 1
    (again,) = claim(worker)
    assert again["attempts"] == 2
    second = worker.post(
        "/workers/nack", {"worker_id": "w-1", "task_id": again["id"], "error": "still down"}, format="json"
    ).json()
    assert second["status"] == "dead"

    dlq = admin_api.get("/queues/email_jobs/dlq").json()
    (entry,) = dlq["results"]
    assert entry["id"] == created["id"]
    assert entry["last_error"] == "still down"
    assert entry["attempts"] == 2
    assert entry["replay_count"] == 0

    replayed = admin_api.post(f"/queues/email_jobs/dlq/{created['id']}/replay")
    assert replayed.status_code == 200
    assert replayed.json()["status"] == "pending"
    assert replayed.json()["attempts"] == 0
    assert admin_api.get("/queues/email_jobs/dlq").json()["results"] == []
    everything = admin_api.get("/queues/email_jobs/dlq?include_replayed=true").json()["results"]
    assert everything[0]["replay_count"] == 1
