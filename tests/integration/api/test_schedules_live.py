"""A schedule created over HTTP fires through the production processes, and its tasks are claimed."""

from __future__ import annotations

import time

import httpx
import pytest

from queues.apikeys import create_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_an_every_second_schedule_fires_through_the_scheduler_and_workers_claim_its_tasks(live_stack):
    _, admin = create_key("live-admin", "admin")
    _, worker = create_key("live-worker", "worker")
    api = live_stack.start_api()
    live_stack.start_loop("run_scheduler")
    as_admin = {"Authorization": f"Bearer {admin}"}
    assert httpx.post(f"{api}/queues", json={"name": "ticks"}, headers=as_admin).status_code == 201
    body = {"name": "tick", "queue": "ticks", "every_seconds": 1, "payload": {"n": 1}, "kind": "ticks.tick"}
    created = httpx.post(f"{api}/schedules", json=body, headers=as_admin)
    assert created.status_code == 201, created.text

    deadline = time.monotonic() + 20
    tasks: list[dict] = []
    while len(tasks) < 3 and time.monotonic() < deadline:
        claim = {"worker_id": "w", "queue": "ticks", "max_tasks": 10, "wait_seconds": 2}
        answer = httpx.post(
            f"{api}/workers/claim", json=claim, headers={"Authorization": f"Bearer {worker}"}, timeout=10
        )
        assert answer.status_code == 200, answer.text
        tasks += answer.json()["tasks"]
    assert len(tasks) >= 3, live_stack.output()
    assert {(t["payload"]["n"], t["kind"]) for t in tasks} == {(1, "ticks.tick")}
    assert all(t["idempotency_key"].startswith("schedule:tick:") and t["idempotency_key"].endswith("Z") for t in tasks)
    assert len({t["idempotency_key"] for t in tasks}) == len(tasks)

    schedule = httpx.get(f"{api}/schedules/tick", headers=as_admin).json()
    assert schedule["last_task_id"] is not None and schedule["last_run_at"] is not None
    assert httpx.patch(f"{api}/schedules/tick", json={"paused": True}, headers=as_admin).json()["next_run_at"] is None
