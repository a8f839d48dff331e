"""SIGKILL the primary serving a queue's slot under a live API: the Cluster promotes its replica,
TaskForge keeps enqueuing, claiming and acking with the same settings, every task is done exactly
once in Postgres, and the lane and the doorbell come back on the promoted node."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter

import httpx
import pytest
from django.db.models import Count

from queues.apikeys import create_key
from queues.dispatch import doorbell, lanes
from queues.models import Task, TaskEvent
from taskforge.dev.redis_cluster import LocalCluster
from tests.factories import QueueFactory

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
    accepted: list[str] = []
    acked: list[str] = []
    failures: list[str] = []
    producing = threading.Event()
    producing.set()
    working = threading.Event()
    working.set()

    def produce() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=15) as client:
            for n in itertools.count():
                if not producing.is_set():
                    return
                for _ in range(5):  # a producer retries with the same key until it gets an answer
                    try:
                        response = client.post(
                            f"/queues/{name}/tasks", json={"payload": {"n": n}, "idempotency_key": f"k{n}"}
                        )
                    except httpx.HTTPError:
                        continue
                    if response.status_code in (200, 201):
                        accepted.append(response.json()["id"])
                        break
                    failures.append(f"enqueue {n}: {response.status_code} {response.text[:200]}")
                time.sleep(0.02)

    def work(worker_id: str) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=15) as client:
            while working.is_set():
                body = {"worker_id": worker_id, "queue": name, "max_tasks": 10, "wait_seconds": 1}
                try:
                    response = client.post("/workers/claim", json=body)
                    if response.status_code != 200:
                        failures.append(f"claim: {response.status_code} {response.text[:200]}")
                        continue
                    items = [{"task_id": t["id"], "lease_token": t["lease_token"]} for t in response.json()["tasks"]]
                    if items:
                        results = client.post("/workers/ack/batch", json={"worker_id": worker_id, "items": items})
                        acked.extend(r["task_id"] for r in results.json()["results"] if r.get("status") == "done")
                except httpx.HTTPError as exc:
                    failures.append(f"worker: {exc!r}")

    threads = [threading.Thread(target=produce), *(threading.Thread(target=work, args=(f"w{i}",)) for i in range(2))]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2)
        before = len(accepted)
        promoted_port = own_cluster.kill_primary_and_await_promotion(victim)
        time.sleep(2)  # keep producing and claiming against the promoted primary
        producing.clear()
        threads[0].join(30)
        deadline = time.monotonic() + 60
        while set(acked) != set(accepted) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        producing.clear()
        working.clear()
        for thread in threads:
            thread.join(30)

    assert before > 0 and len(accepted) > before, (before, len(accepted))
    assert set(acked) == set(accepted), (
        f"{len(set(accepted) - set(acked))} accepted tasks never done\n{live_stack.output()}"
    )
    assert [tid for tid, n in Counter(acked).items() if n > 1] == [], "a task was acked twice"
    assert Task.objects.filter(queue__name=name).count() == len(set(accepted))
    assert Task.objects.filter(queue__name=name).exclude(status="done").count() == 0
    # Postgres' own history: one move into done per task, none twice.
    done_moves = TaskEvent.objects.filter(task_id__in=accepted, to_status="done").values("task_id")
    assert {str(row["task_id"]): row["n"] for row in done_moves.annotate(n=Count("id"))} == dict.fromkeys(
        set(accepted), 1
    )
    assert failures == []

    promoted = own_cluster.node(promoted_port)
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
