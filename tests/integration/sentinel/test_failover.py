"""SIGKILL the Redis primary under a live API: after the sentinels promote the replica
TaskForge keeps enqueuing, claiming and acking with the same settings, and loses no task."""

from __future__ import annotations

import time

import httpx
import pytest

from queues.apikeys import create_key
from queues.dispatch import doorbell, lanes
from tests.factories import QueueFactory
from tests.integration.failover import load_through

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_primary_killed_mid_run_loses_nothing(live_stack, sentinel_cluster):
    QueueFactory(name="ha")
    _, key = create_key("ha-admin", "admin")
    env = {"REDIS_URL": sentinel_cluster.url(0)}
    url = live_stack.start_api(workers=2, extra_env=env)
    live_stack.start_loop("run_dispatcher", extra_env=env)
    headers = {"Authorization": f"Bearer {key}"}
    promoted: list[int] = []
    load = load_through(url, headers, "ha", lambda: promoted.append(sentinel_cluster.fail_over()[1]))
    load.assert_nothing_lost(live_stack.output)

    # The same settings now reach the promoted replica: a new queue's lane appears there.
    QueueFactory(name="after")
    with httpx.Client(base_url=url, headers=headers, timeout=15) as client:
        assert client.get("/readyz").status_code == 200
        created = client.post("/queues/after/tasks", json={"payload": {}})
        assert created.status_code == 201, created.text
        promoted_node = sentinel_cluster.node(promoted[0])
        deadline = time.monotonic() + 10
        while promoted_node.zscore(lanes.ready_key("after"), created.json()["id"]) is None:
            assert time.monotonic() < deadline, "the new primary never got the task's lane entry"
            time.sleep(0.2)
        claimed = client.post("/workers/claim", json={"worker_id": "w", "queue": "after", "wait_seconds": 5})
        [task] = claimed.json()["tasks"]
        lease = {"worker_id": "w", "task_id": task["id"], "lease_token": task["lease_token"]}
        assert client.post("/workers/ack", json=lease).status_code == 200
        # Long polls listen for doorbells on the promoted primary again (the subscription followed too).
        client.post("/workers/claim", json={"worker_id": "w", "queue": "after", "wait_seconds": 1})
        deadline = time.monotonic() + 15
        while promoted_node.pubsub_numsub(f"{doorbell.CHANNEL_PREFIX}{{0}}")[0][1] == 0:
            assert time.monotonic() < deadline, "no API process subscribed to the doorbell on the new primary"
            time.sleep(0.2)
