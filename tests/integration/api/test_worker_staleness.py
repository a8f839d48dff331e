"""GET /workers: ``stale`` is judged on heartbeats only; claims do not count as heartbeats."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def _listing(admin_api) -> dict:  # type: ignore[no-untyped-def]
    response = admin_api.get("/workers")
    assert response.status_code == 200
    return {w["worker_id"]: w for w in response.json()["results"]}


def _age(worker_id: str, column: str, seconds: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE tf_worker SET {column} = now() - make_interval(secs => %s) WHERE worker_id = %s",
            [seconds, worker_id],
        )


def test_a_worker_that_still_claims_but_whose_heartbeats_stopped_is_stale(  # type: ignore[no-untyped-def]
    admin_api, producer, worker, queue, settings
) -> None:
    timeout = settings.TASKFORGE_HEARTBEAT_TIMEOUT
    for n in range(2):
        assert producer.post("/queues/email_jobs/tasks", {"payload": {"n": n}}, format="json").status_code == 201
    claimed = worker.post("/workers/claim", {"worker_id": "w-1", "queue": "email_jobs"}, format="json").json()
    [task] = claimed["tasks"]
    beat = {"worker_id": "w-1", "task_id": task["id"]}
    assert worker.post("/workers/heartbeat", beat, format="json").status_code == 200
    _age("w-1", "last_heartbeat_at", timeout + 5)  # the heartbeat thread died...
    _age("w-1", "last_claim_at", 1)  # ...but the claim loop goes on
    listed = _listing(admin_api)["w-1"]
    assert listed["current_tasks"] == [task["id"]]
    assert listed["stale"] is True
