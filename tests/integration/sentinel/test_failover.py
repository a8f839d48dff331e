"""SIGKILL the Redis primary under a live API: after the sentinels promote the replica
TaskForge keeps enqueuing, claiming and acking with the same settings, and loses no task."""

from __future__ import annotations

import threading
import time
from collections import Counter

import httpx
import pytest

from queues.apikeys import create_key
from queues.dispatch import doorbell, lanes
from queues.models import Task
from tests.factories import QueueFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_primary_killed_mid_run_loses_nothing(live_stack, sentinel_cluster):
    QueueFactory(name="ha")
    _, key = create_key("ha-admin", "admin")
    env = {"REDIS_URL": sentinel_cluster.url(0)}
    url = live_stack.start_api(workers=2, extra_env=env)
    live_stack.start_loop("run_dispatcher", extra_env=env)
    headers = {"Authorization": f"Bearer {key}"}
    accepted: list[str] = []
    acked: list[str] = []
    failures: list[str] = []
    producing = threading.Event()
    producing.set()
    stop_working = threading.Event()

    def produce() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=15) as client:
            n = 0
            while producing.is_set():
                n += 1
                for _ in range(5):  # a producer retries with the same key until it gets an answer
                    try:
                        response = client.post(
                            "/queues/ha/tasks", json={"payload": {"n": n}, "idempotency_key": f"k{n}"}
                        )
                    except httpx.HTTPError:
                        continue
                    if response.status_code in (200, 201):
                        accepted.append(response.json()["id"])
                        break
                    failures.append(f"enqueue {n}: {response.status_code} {response.text[:200]}")
                time.sleep(0.02)

    def work() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=15) as client:
            while not stop_working.is_set():
                body = {"worker_id": "w", "queue": "ha", "max_tasks": 10, "wait_seconds": 1}
                try:
                    response = client.post("/workers/claim", json=body)
                    if response.status_code != 200:
                        failures.append(f"claim: {response.status_code} {response.text[:200]}")
                        continue
                    items = [{"task_id": t["id"], "lease_token": t["lease_token"]} for t in response.json()["tasks"]]
                    if items:
                        results = client.post("/workers/ack/batch", json={"worker_id": "w", "items": items})
                        acked.extend(r["task_id"] for r in results.json()["results"] if r.get("status") == "done")
                except httpx.HTTPError as exc:
                    failures.append(f"worker: {exc!r}")

    threads = [threading.Thread(target=produce), threading.Thread(target=work)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2)
        before = len(accepted)
        _, promoted_port = sentinel_cluster.fail_over()
        time.sleep(2)  # keep producing against the promoted primary
        producing.clear()
        threads[0].join(30)
        deadline = time.monotonic() + 60
        while set(acked) != set(accepted) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        producing.clear()
        stop_working.set()
        for thread in threads:
            thread.join(30)

    assert before > 0 and len(accepted) > before, (before, len(accepted))
    assert set(acked) == set(accepted), (
        f"{len(set(accepted) - set(acked))} accepted tasks never done\n{live_stack.output()}"
    )
    assert [tid for tid, n in Counter(acked).items() if n > 1] == [], "a task was acked twice"
    assert Task.objects.filter(queue__name="ha").exclude(status="done").count() == 0
    assert failures == []

    # The same settings now reach the promoted replica: a new queue's lane appears there.
    QueueFactory(name="after")
    with httpx.Client(base_url=url, headers=headers, timeout=15) as client:
        assert client.get("/readyz").status_code == 200
        created = client.post("/queues/after/tasks", json={"payload": {}})
        assert created.status_code == 201, created.text
        promoted = sentinel_cluster.node(promoted_port)
        deadline = time.monotonic() + 10
        while promoted.zscore(lanes.ready_key("after"), created.json()["id"]) is None:
            assert time.monotonic() < deadline, "the new primary never got the task's lane entry"
            time.sleep(0.2)
        claimed = client.post("/workers/claim", json={"worker_id": "w", "queue": "after", "wait_seconds": 5})
        [task] = claimed.json()["tasks"]
        lease = {"worker_id": "w", "task_id": task["id"], "lease_token": task["lease_token"]}
        assert client.post("/workers/ack", json=lease).status_code == 200
        # Long polls listen for doorbells on the promoted primary again (the subscription followed too).
        client.post("/workers/claim", json={"worker_id": "w", "queue": "after", "wait_seconds": 1})
        deadline = time.monotonic() + 15
        while promoted.pubsub_numsub(f"{doorbell.CHANNEL_PREFIX}{{0}}")[0][1] == 0:
            assert time.monotonic() < deadline, "no API process subscribed to the doorbell on the new primary"
            time.sleep(0.2)
