"""Real ``run_pusher`` processes against a real receiver: max_concurrent across processes,
a SIGKILLed pusher losing nothing, and a larger run delivered exactly once per task."""

from __future__ import annotations

import json
import shutil
import signal
import time
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

import pytest

from queues import lifecycle
from queues.apikeys import create_key
from queues.models import Queue, Task, TaskEvent
from queues.push import secrets as push_secrets
from taskforge_client.push import verify_signature
from tests.factories import QueueFactory
from tests.integration.queues.test_redis_loss import OwnRedis
from tests.push_receiver import Reply, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PUSHER_ENV = {"TASKFORGE_PUSH_ALLOW_PRIVATE": "true"}
# Short leases so a killed pusher's deliveries come back within seconds.
SHORT_LEASES = {"TASKFORGE_HEARTBEAT_TIMEOUT": "2", "TASKFORGE_WATCHDOG_INTERVAL": "1"}


def push_queue(url: str, *, max_concurrent: int, **push: Any) -> Queue:
    queue = QueueFactory(name="hooks", retry_base_ms=100, retry_max_delay_ms=500, max_retries=5,
                         push={"url": url, "timeout_seconds": 30, "max_concurrent": max_concurrent, "headers": {},
                               **push})  # fmt: skip
    push_secrets.set_for_new_push(queue)
    queue.save()
    return queue


def enqueue_many(queue: Queue, count: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, count, 500):
        batch = [
            lifecycle.NewTask(
                payload={"n": n},
                priority=5,
                scheduled_at=None,
                idempotency_key=None,
                max_retries=None,
                fingerprint=None,
                kind=None,
                timeout_seconds=None,
            )
            for n in range(start, min(count, start + 500))
        ]
        ids += [str(row["id"]) for row, _ in lifecycle.enqueue(queue, batch)]
    return ids


def all_done(ids: list[str]) -> bool:
    return Task.objects.filter(id__in=ids, status="done").count() == len(ids)


def test_max_concurrent_holds_across_two_pusher_processes(live_stack, receiver) -> None:  # type: ignore[no-untyped-def]
    receiver.respond = lambda _: Reply(200, delay=0.25)
    queue = push_queue(receiver.url, max_concurrent=5)
    ids = enqueue_many(queue, 60)
    # Three each: together they could run six, so only the shared semaphore keeps it at five,
    # and reaching five takes both.
    for _ in range(2):
        live_stack.start_loop("run_pusher", extra_env={**PUSHER_ENV, "TASKFORGE_PUSHER_CONCURRENCY": "3"})
    wait_until(lambda: all_done(ids), timeout=60)
    assert receiver.max_in_flight == 5, receiver.max_in_flight
    assert Counter(r.task_id for r in receiver.received) == Counter({task_id: 1 for task_id in ids})
    pushers = set(Task.objects.filter(id__in=ids).values_list("claimed_by", flat=True))
    assert len(pushers) == 2, pushers


def test_a_sigkilled_pusher_loses_no_task(live_stack, receiver) -> None:  # type: ignore[no-untyped-def]
    # First attempts hang: the pusher that holds them is killed mid-delivery.
    receiver.respond = lambda got: Reply(200, delay=60) if got.attempt == 1 else Reply(200, b'{"second": true}')
    queue = push_queue(receiver.url, max_concurrent=10)
    ids = enqueue_many(queue, 8)
    victim = live_stack.start_loop("run_pusher", extra_env={**PUSHER_ENV, **SHORT_LEASES})
    wait_until(lambda: len(receiver.received) == 8, timeout=30)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    live_stack.start_loop("run_watchdog", extra_env=SHORT_LEASES)
    live_stack.start_loop("run_scheduler", extra_env=SHORT_LEASES)
    live_stack.start_loop("run_pusher", extra_env={**PUSHER_ENV, **SHORT_LEASES})
    wait_until(lambda: all_done(ids), timeout=60)
    for task in Task.objects.filter(id__in=ids):
        assert task.attempts == 2 and task.result == {"second": True}
        assert task.events.get(to_status="retry").detail.startswith("lease expired")
    secret = Queue.objects.get(name="hooks").push_secret
    assert sorted(r.attempt for r in receiver.received) == [1] * 8 + [2] * 8
    assert all(verify_signature(r.headers, r.body, secret) for r in receiver.received)


def test_a_larger_run_is_delivered_exactly_once_per_task(live_stack, receiver) -> None:  # type: ignore[no-untyped-def]
    queue = push_queue(receiver.url, max_concurrent=50)
    ids = enqueue_many(queue, 2000)
    for _ in range(2):
        live_stack.start_loop("run_pusher", extra_env=PUSHER_ENV)
    live_stack.start_loop("run_dispatcher")
    started = time.monotonic()
    wait_until(lambda: all_done(ids) or TaskEvent.objects.filter(to_status="retry").exists(), timeout=240, interval=0.5)
    elapsed = time.monotonic() - started
    failures = list(TaskEvent.objects.filter(to_status="retry").values_list("detail", flat=True)[:5])
    assert not failures, failures
    delivered = Counter(r.task_id for r in receiver.received)
    assert delivered == Counter({task_id: 1 for task_id in ids})
    assert receiver.max_in_flight <= 50
    print(f"2000 push deliveries in {elapsed:.1f} s ({2000 / elapsed:.0f}/s)")


def test_a_live_api_refuses_claims_naming_a_push_queue_and_skips_them_otherwise(live_stack) -> None:  # type: ignore[no-untyped-def]
    queue = push_queue("https://receiver.example.com/hook", max_concurrent=1)
    enqueue_many(queue, 1)
    _, key = create_key("live-worker", "worker")
    url = live_stack.start_api()  # claims are served by the lean edge (taskforge.http.lean)

    def claim(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(f"{url}/workers/claim", data=json.dumps(body).encode(), method="POST",
                                         headers={"Authorization": f"Bearer {key}",
                                                  "Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    status, body = claim({"worker_id": "w", "queue": "hooks"})
    assert (status, body["error"]["code"]) == (409, "conflict")
    assert claim({"worker_id": "w", "wait_seconds": 1}) == (200, {"tasks": []})
    assert Task.objects.get(queue=queue).status == "pending"


def test_sigterm_lets_deliveries_in_flight_finish_and_records_them(live_stack, receiver) -> None:  # type: ignore[no-untyped-def]
    receiver.respond = lambda _: Reply(200, b'{"late": true}', delay=2)
    queue = push_queue(receiver.url, max_concurrent=10)
    ids = enqueue_many(queue, 3)
    pusher = live_stack.start_loop("run_pusher", extra_env=PUSHER_ENV)
    wait_until(lambda: len(receiver.received) == 3, timeout=30)
    pusher.send_signal(signal.SIGTERM)
    assert pusher.wait(timeout=15) == 0
    assert all_done(ids), "answered after the SIGTERM, recorded before the exit"
    assert {task.result["late"] for task in Task.objects.filter(id__in=ids)} == {True}


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs a redis-server binary")
def test_redis_flushed_then_restarted_mid_run_keeps_max_concurrent_and_loses_nothing(live_stack, receiver) -> None:  # type: ignore[no-untyped-def]
    own = OwnRedis()
    own.start()
    try:
        receiver.respond = lambda _: Reply(200, delay=0.3)
        queue = push_queue(receiver.url, max_concurrent=3)
        ids = enqueue_many(queue, 40)
        env = {**PUSHER_ENV, "REDIS_URL": own.url, "TASKFORGE_PUSHER_CONCURRENCY": "3"}
        for _ in range(2):
            live_stack.start_loop("run_pusher", extra_env=env)
        wait_until(lambda: len(receiver.received) >= 8, timeout=30)
        own.flushall()  # every slot and the marker gone while deliveries are in flight
        wait_until(lambda: len(receiver.received) >= 20, timeout=30)
        own.stop()  # Redis gone: deliveries in flight finish, none starts
        time.sleep(2)
        stalled_at = len(receiver.received)
        time.sleep(1)
        assert len(receiver.received) == stalled_at, "no delivery starts while Redis is down"
        own.start()
        wait_until(lambda: all_done(ids), timeout=60)
    finally:
        own.stop()
    assert receiver.max_in_flight <= 3, receiver.max_in_flight
    assert Counter(r.task_id for r in receiver.received) == Counter({task_id: 1 for task_id in ids})
