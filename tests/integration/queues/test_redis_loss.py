"""Losing Redis mid-run (FLUSHALL, then a restart) loses no task and duplicates no claim."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
import redis
from django.db import connection
from django.utils import timezone

from queues.apikeys import create_key
from queues.models import Task, TaskEvent
from tests.factories import QueueFactory
from tests.live import free_port

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs a redis-server binary"),
]


class OwnRedis:
    """A throwaway redis-server on a free port: this test flushes, kills and restarts it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port, socket_timeout=1).ping()
                return
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def flushall(self) -> None:
        redis.Redis(port=self.port).flushall()


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    server = OwnRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_flushall_and_restart_mid_run_lose_nothing_and_duplicate_nothing(live_stack, own_redis):
    QueueFactory(name="durable", max_retries=3)
    _, key = create_key("live-admin", "admin")
    env = {"REDIS_URL": own_redis.url}
    urls = [live_stack.start_api(extra_env=env) for _ in range(2)]
    live_stack.start_loop("run_scheduler", extra_env=env)
    live_stack.start_loop("run_dispatcher", extra_env=env)
    headers = {"Authorization": f"Bearer {key}"}
    accepted: list[str] = []
    produce_until = time.monotonic() + 7
    all_done = threading.Event()
    failures: list[str] = []

    def produce(n: int) -> None:
        with httpx.Client(base_url=urls[n % 2], headers=headers, timeout=10) as client:
            batch = 0
            while time.monotonic() < produce_until:
                batch += 1
                items = [
                    {
                        "payload": {"fail_once": i % 7 == 0},
                        "priority": 1 + i % 10,
                        "idempotency_key": f"p{n}-{batch}-{i}",
                        # Some due at once, some a little later (through the scheduler).
                        **({"scheduled_at": _in(0.5 + (i % 4) * 0.5)} if i % 3 == 0 else {}),
                    }
                    for i in range(5)
                ]
                for _ in range(5):  # a producer retries with the same keys until it gets an answer
                    try:
                        response = client.post("/queues/durable/tasks/batch", json={"tasks": items})
                    except httpx.HTTPError:
                        continue
                    if response.status_code in (200, 201):
                        accepted.extend(task["id"] for task in response.json()["tasks"])
                        break
                else:
                    failures.append(f"enqueue batch {n}-{batch} never accepted")
                time.sleep(0.05)

    def work(n: int) -> None:
        with httpx.Client(base_url=urls[n % 2], headers=headers, timeout=10) as client:
            while not all_done.is_set():
                body = {"worker_id": f"w{n}", "queue": "durable", "max_tasks": 10, "wait_seconds": 1}
                try:
                    tasks = client.post("/workers/claim", json=body).json()["tasks"]
                    acks = []
                    for task in tasks:
                        lease = {"task_id": task["id"], "lease_token": task["lease_token"]}
                        if task["payload"]["fail_once"] and task["attempts"] == 1:
                            client.post(
                                "/workers/nack",
                                json={"worker_id": f"w{n}", **lease, "error": "once", "retry_after_seconds": 1},
                            )
                        else:
                            acks.append(lease)
                    if acks:
                        client.post("/workers/ack/batch", json={"worker_id": f"w{n}", "items": acks})
                except httpx.HTTPError as exc:
                    failures.append(f"worker {n}: {exc!r}")
                    time.sleep(0.2)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(2)]
    threads += [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(2)
    own_redis.flushall()  # lanes, scheduled sets, buckets: all gone at once
    time.sleep(1.5)
    own_redis.stop()  # and then Redis itself, for a while
    time.sleep(1.5)
    own_redis.start()
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        if time.monotonic() > produce_until and _done_count() >= len(accepted) > 0:
            break
        time.sleep(0.25)
    all_done.set()
    for thread in threads:
        thread.join(20)
    connection.close()

    assert not [f for f in failures if "enqueue" in f], failures[:5]
    tasks = dict(Task.objects.values_list("id", "status"))
    assert len(set(accepted)) == len(tasks), "an accepted task is missing, or an unknown one appeared"
    not_done = {task_id: status for task_id, status in tasks.items() if status != "done"}
    assert not not_done, f"{len(not_done)} of {len(tasks)} tasks did not finish: {Counter(not_done.values())}"
    done_events = Counter(TaskEvent.objects.filter(to_status="done").values_list("task_id", flat=True))
    assert set(done_events) == set(tasks) and set(done_events.values()) == {1}, "a task reached done twice"
    claims = Counter(TaskEvent.objects.filter(to_status="claimed").values_list("task_id", flat=True))
    retries = Counter(TaskEvent.objects.filter(to_status="retry").values_list("task_id", flat=True))
    assert all(claims[task_id] == 1 + retries[task_id] for task_id in tasks), "a task was claimed twice"
    print(
        f"\nredis loss: {len(tasks)} tasks, {sum(retries.values())} retried, all done exactly once; "
        f"{len(failures)} worker request errors while Redis was down"
    )


def _in(seconds: float) -> str:
    return (timezone.now() + timedelta(seconds=seconds)).isoformat()


def _done_count() -> int:
    count = Task.objects.filter(status="done").count()
    connection.close()
    return count
