"""The Python client against a live TaskForge API (real Postgres and Redis).

Its request shapes, error mapping and retry policy against an in-memory
transport are in tests/unit/client/test_client.py.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from taskforge_client import (
    Conflict,
    Forbidden,
    LeaseLost,
    NotFound,
    PayloadTooLarge,
    TaskForgeClient,
    TaskForgeError,
    Unauthorized,
    ValidationError,
)
from tests.factories import QueueFactory
from tests.integration.workers.conftest import WITHOUT_DJANGO, transitions
from tests.live import ROOT


def live(test):  # type: ignore[no-untyped-def]
    """Marks a test that talks to real TaskForge processes."""
    return pytest.mark.slow(pytest.mark.django_db(transaction=True)(test))


def test_the_worker_runs_under_the_django_blocker_and_the_blocker_refuses_django():
    """The live worker tests run the worker under WITHOUT_DJANGO: the blocker must be doing its job.

    That the installed package needs no Django at all is checked against the
    built wheel, in a virtualenv without Django: tests/system/test_client_package.py.
    """
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_DJANGO, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "--handler" in done.stdout
    refused = subprocess.run(
        [sys.executable, "-c", WITHOUT_DJANGO.split("sys.argv =")[0] + "import taskforge_client.django_tasks\n"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode != 0
    assert "must run without Django" in refused.stderr


@live
def test_producer_and_worker_calls_round_trip(taskforge):
    QueueFactory(name="mail", retry_base_ms=100, retry_max_delay_ms=200)
    producer, worker = taskforge.client("producer"), taskforge.client("worker")

    first = producer.enqueue("mail", {"to": "a@example.com"}, priority=2, idempotency_key="welcome-a")
    replay = producer.enqueue("mail", {"to": "a@example.com"}, priority=2, idempotency_key="welcome-a")
    assert replay["id"] == first["id"]
    later = datetime.now(UTC) + timedelta(hours=1)
    batch = producer.enqueue_batch(
        "mail", [{"payload": {"n": 1}, "priority": 3}, {"payload": {"n": 2}, "scheduled_at": later, "max_retries": 0}]
    )
    assert [t["priority"] for t in batch] == [3, 5]
    assert datetime.fromisoformat(batch[1]["scheduled_at"]) == later
    assert batch[1]["max_retries"] == 0

    (claimed,) = worker.claim("w-1", "mail")
    assert claimed["id"] == first["id"] and claimed["lease_token"]
    beat = worker.heartbeat("w-1", claimed["id"], claimed["lease_token"])
    assert beat["status"] == "executing"
    done = worker.ack("w-1", claimed["id"], claimed["lease_token"], {"sent": True})
    assert (done["status"], done["result"]) == ("done", {"sent": True})
    with pytest.raises(LeaseLost) as lost:
        worker.heartbeat("w-1", claimed["id"], claimed["lease_token"])
    assert (lost.value.status, lost.value.code) == (409, "lease_lost")

    (second,) = worker.claim("w-1", "mail", max_tasks=5)  # the other one is scheduled for later
    failed = worker.nack("w-1", second["id"], "smtp down", second["lease_token"], retry_after_seconds=0)
    assert (failed["status"], failed["last_error"]) == ("retry", "smtp down")

    # Batch forms judge each item alone.
    third = producer.enqueue("mail", {"n": 3})
    fourth = producer.enqueue("mail", {"n": 4})
    leased = {t["id"]: t for t in worker.claim("w-2", "mail", max_tasks=10, wait_seconds=2)}
    assert {third["id"], fourth["id"]} <= set(leased)
    results = worker.ack_batch(
        "w-2",
        [
            {"task_id": third["id"], "lease_token": leased[third["id"]]["lease_token"], "result": {"n": 3}},
            {"task_id": claimed["id"], "lease_token": claimed["lease_token"]},
        ],
    )
    assert results[0] == {"task_id": third["id"], "status": "done"}
    assert results[1]["error"]["code"] == "lease_lost"
    nacked = worker.nack_batch(
        "w-2",
        [{"task_id": fourth["id"], "lease_token": leased[fourth["id"]]["lease_token"], "error": "x", "retry": False}],
    )
    assert nacked == [{"task_id": fourth["id"], "status": "dead"}]

    task = producer.get_task("mail", first["id"])
    assert [to for _, to, _ in transitions(task)] == ["pending", "claimed", "executing", "done"]
    stats = producer.stats("mail")
    assert stats["depth"]["done"] == 2
    assert stats["depth"]["dead"] == 1
    assert producer.cancel("mail", batch[1]["id"])["status"] == "cancelled"


@live
def test_long_poll_outlasts_the_client_timeout(taskforge):
    QueueFactory(name="mail")
    worker = taskforge.client("worker", timeout=1)
    started = time.monotonic()
    assert worker.claim("w-1", "mail", wait_seconds=2) == []
    assert 1.9 < time.monotonic() - started < 5


@live
def test_error_answers_become_exceptions_named_after_their_code(live_stack, make_key):
    QueueFactory(name="mail")
    url = live_stack.start_api(extra_env={"TASKFORGE_MAX_PAYLOAD_BYTES": "2048"})
    producer = TaskForgeClient(url, make_key("producer"))
    worker = TaskForgeClient(url, make_key("worker"))
    stranger = TaskForgeClient(url, "tf_not_a_real_key")
    try:
        with pytest.raises(Unauthorized) as caught:
            stranger.stats("mail")
        assert caught.value.status == 401
        with pytest.raises(Forbidden):
            worker.enqueue("mail", {"n": 1})
        with pytest.raises(NotFound) as caught:
            producer.enqueue("no_such_queue", {"n": 1})
        assert (caught.value.status, caught.value.code) == (404, "not_found")
        with pytest.raises(ValidationError) as caught:
            producer.enqueue("mail", {"n": 1}, priority=11)
        assert caught.value.status == 400
        assert "priority" in caught.value.fields
        producer.enqueue("mail", {"n": 1}, idempotency_key="k")
        with pytest.raises(Conflict) as caught:
            producer.enqueue("mail", {"n": 2}, idempotency_key="k")
        assert caught.value.code == "conflict"
        with pytest.raises(PayloadTooLarge):
            producer.enqueue("mail", {"blob": "x" * 4096})
        (leased,) = worker.claim("w-1", "mail")
        with pytest.raises(LeaseLost):
            worker.ack("w-2", leased["id"], leased["lease_token"])
        with pytest.raises(NotFound):
            worker.ack("w-1", "00000000-0000-0000-0000-000000000000")
        # Every one of them is a TaskForgeError, with the contract's message.
        with pytest.raises(TaskForgeError, match="does not exist"):
            producer.get_task("mail", "00000000-0000-0000-0000-000000000000")
        with pytest.raises(ValueError, match="timezone-aware"):
            producer.enqueue("mail", {"n": 1}, scheduled_at=datetime(2030, 1, 1))
    finally:
        for client in (producer, worker, stranger):
            client.close()


@live
def test_a_batching_producer_shared_by_threads_creates_each_task_once(taskforge):
    QueueFactory(name="mail")
    producer = taskforge.client("producer")
    ids: dict[int, str] = {}
    errors: list[BaseException] = []

    def produce(start: int) -> None:
        handles = [(n, batcher.enqueue({"n": n}, priority=1 + n % 10)) for n in range(start, start + 60)]
        for n, handle in handles:
            ids[n] = handle.task_id
        refused = batcher.enqueue({"n": -1}, scheduled_at="not a time")
        errors.append(refused.exception(timeout=30))  # type: ignore[arg-type]

    with producer.batch("mail", max_size=50, max_delay=0.02) as batcher:
        threads = [threading.Thread(target=produce, args=(start,)) for start in range(0, 240, 60)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        late = batcher.enqueue({"n": 240})
    ids[240] = late.task_id  # sent on the way out of the block

    assert len(set(ids.values())) == 241
    for n in (0, 59, 133, 240):
        task = producer.get_task("mail", ids[n])
        assert task["payload"] == {"n": n}
        assert task["idempotency_key"].startswith("batch-")
    assert producer.stats("mail")["depth"]["pending"] == 241  # the refused items created nothing
    assert len(errors) == 4
    assert all(isinstance(error, ValidationError) and "scheduled_at" in error.fields for error in errors)
