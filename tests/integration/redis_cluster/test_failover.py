"""SIGKILL the primary serving a queue's slot under a live API: the Cluster promotes its replica,
TaskForge keeps enqueuing, claiming and acking with the same settings, every task is done exactly
once in Postgres, and the lane and the doorbell come back on the promoted node."""

from __future__ import annotations

import itertools
import threading
import time

import httpx
import pytest

from queues.apikeys import create_key
from queues.dispatch import doorbell, lanes
from queues.models import Task
from taskforge.dev.redis_cluster import LocalCluster
from tests.factories import QueueFactory
from tests.integration.failover import load_through

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.xdist_group("redis_cluster")]

#: The doorbell's channel as the servers name it (a Cluster has database 0 only).
CHANNEL = f"{doorbell.CHANNEL_PREFIX}{{0}}"


def queue_on_the_doorbells_shard(cluster: LocalCluster) -> str:
    """A queue name whose slot lives on the same primary as the doorbell: one kill hits both."""
    shard = cluster.primary_for(CHANNEL)
    return next(name for n in itertools.count() if cluster.primary_for(lanes.ready_key(name := f"ha{n}")) == shard)


def test_the_primary_of_a_queues_slot_killed_mid_run_loses_and_duplicates_nothing(live_stack, own_cluster):
    name = queue_on_the_doorbells_shard(own_cluster)
    victim = own_cluster.primary_for(lanes.ready_key(name))
    QueueFactory(name=name)
    _, key = create_key("ha-admin", "admin")
    env = {"REDIS_URL": own_cluster.url()}
    url = live_stack.start_api(workers=2, extra_env=env)
    live_stack.start_loop("run_dispatcher", extra_env=env)
    headers = {"Authorization": f"Bearer {key}"}
    promoted_ports: list[int] = []
    load = load_through(
        url, headers, name, lambda: promoted_ports.append(own_cluster.kill_primary_and_await_promotion(victim))
    )
    load.assert_nothing_lost(live_stack.output)

    promoted = own_cluster.node(promoted_ports[0])
    with httpx.Client(base_url=url, headers=headers, timeout=15) as client:
        assert client.get("/readyz").status_code == 200
        # New tasks reach the promoted primary's lane; when that lane is lost too (as the
        # writes a replica had not yet received are), the dispatcher rebuilds it from Postgres.
        created = [client.post(f"/queues/{name}/tasks", json={"payload": {"after": n}}) for n in range(5)]
        assert [response.status_code for response in created] == [201] * 5
        ids = {response.json()["id"] for response in created}
        wait_for(lambda: ids <= set(lane_on(promoted, name)), "the new tasks in the promoted primary's lane")
        promoted.delete(lanes.ready_key(name))
        wait_for(lambda: ids <= set(lane_on(promoted, name)), "the dispatcher to rebuild the lost lane")
        claimed = client.post("/workers/claim", json={"worker_id": "w", "queue": name, "max_tasks": 10}).json()
        assert {task["id"] for task in claimed["tasks"]} == ids
        items = [{"task_id": t["id"], "lease_token": t["lease_token"]} for t in claimed["tasks"]]
        assert client.post("/workers/ack/batch", json={"worker_id": "w", "items": items}).status_code == 200
    # Long polls listen for doorbells on the promoted primary again (the subscription followed too).
    poll = threading.Thread(target=long_poll, args=(url, headers))
    poll.start()
    try:
        wait_for(lambda: promoted.pubsub_shardnumsub(CHANNEL)[0][1] > 0, "a subscription to the doorbell there")
    finally:
        poll.join(10)
    assert Task.objects.filter(queue__name=name).exclude(status="done").count() == 0


def long_poll(url: str, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=url, headers=headers, timeout=15) as client:
        client.post("/workers/claim", json={"worker_id": "w", "wait_seconds": 3})


def lane_on(node, name: str) -> list[str]:
    return [member.decode() for member in node.zrange(lanes.ready_key(name), 0, -1)]


def wait_for(check, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
