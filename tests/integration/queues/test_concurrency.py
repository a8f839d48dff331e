"""Races with real threads, each on its own Postgres connection (committed data, no test transaction)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections

from queues import lifecycle
from queues.errors import LeaseLost
from queues.models import DeadLetterTask, Status, Task, TaskEvent
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)


def in_threads(count: int, target: Callable[[int], Any], timeout: float = 60) -> list[Any]:
    """Run ``target(i)`` in ``count`` threads released together; re-raise the first failure."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait()
            results[index] = target(index)
        except BaseException as exc:  # reported below, in the test's own thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "threads did not finish"
    if errors:
        raise errors[0]
    return results


def test_eight_claimers_never_share_a_task_and_drain_the_queue():
    queue = QueueFactory(name="race")
    total = 2000
    for start in range(0, total, 1000):
        lifecycle.enqueue(queue, [lifecycle.NewTask(payload={"n": n}) for n in range(start, start + 1000)])
    connection.close()  # the pool has room for every thread

    def claimer(index: int) -> list[uuid.UUID]:
        got: list[uuid.UUID] = []
        empty = 0
        while empty < 2:
            rows = lifecycle.claim(f"w-{index}", [queue.id], 25)
            # Return the connection between claims: eight threads share a small pool.
            connection.close()
            if rows:
                empty = 0
                got.extend(row["id"] for row in rows)
                assert all(row["claimed_by"] == f"w-{index}" for row in rows)
            else:
                empty += 1
        return got

    started = time.monotonic()
    per_thread = in_threads(8, claimer)
    elapsed = time.monotonic() - started
    claimed = [task_id for ids in per_thread for task_id in ids]
    duplicates = [task_id for task_id, n in Counter(claimed).items() if n > 1]
    assert duplicates == []
    assert len(claimed) == total
    assert set(claimed) == set(Task.objects.values_list("id", flat=True))
    assert sum(1 for ids in per_thread if ids) >= 2, "the threads did not really race"
    # Postgres agrees: every task claimed once, by the thread that got it.
    owners = dict(Task.objects.values_list("id", "claimed_by"))
    for index, ids in enumerate(per_thread):
        assert all(owners[task_id] == f"w-{index}" for task_id in ids)
    assert Task.objects.filter(status=Status.CLAIMED, attempts=1).count() == total
    assert TaskEvent.objects.filter(from_status="pending", to_status="claimed").count() == total
    assert elapsed < 60


def test_concurrent_identical_idempotent_enqueues_create_one_task():
    queue = QueueFactory(name="idem")
    body = {"payload": {"user_id": "abc123"}, "idempotency_key": "welcome-abc123"}
    item = lifecycle.NewTask(
        payload=body["payload"], idempotency_key="welcome-abc123", fingerprint=lifecycle.fingerprint(body)
    )
    connection.close()

    def enqueuer(index: int) -> tuple[uuid.UUID, bool]:
        ((row, created),) = lifecycle.enqueue(queue, [item])
        return row["id"], created

    results = in_threads(8, enqueuer)
    assert len({task_id for task_id, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert Task.objects.count() == 1
    assert TaskEvent.objects.count() == 1


def test_concurrent_claims_of_one_task_have_one_winner():
    queue = QueueFactory(name="one")
    task = TaskFactory(queue=queue)
    connection.close()
    winners = in_threads(8, lambda i: lifecycle.claim(f"w-{i}", [queue.id], 1))
    assert sum(len(rows) for rows in winners) == 1
    assert Task.objects.get(pk=task.pk).attempts == 1


def test_ack_racing_the_watchdog_never_both_win():
    """Leases run out while the worker acks and the watchdog sweeps: each task ends one way only.

    A third of the leases has run out before the ack comes (the watchdog must win), a third
    lasts long (the ack must win), and a third runs out within a few milliseconds of its ack:
    the real race, decided by Postgres alone.
    """
    queue = QueueFactory(name="expiry", max_retries=3, retry_base_ms=60_000)
    count = 120
    tasks = TaskFactory.create_batch(count, queue=queue, claimed=True, status=Status.EXECUTING)
    window = 1.0
    plan = []  # (seconds after start to ack, task id, token, lease offset in ms)
    for index, task in enumerate(tasks):
        at = random.uniform(0.05, window)
        kind = index % 3
        lease_ms = {0: -1000, 1: 60_000, 2: int((at + random.uniform(-0.02, 0.02)) * 1000)}[kind]
        plan.append((at, task.id, task.lease_token, lease_ms))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE tf_task t SET lease_expires_at = now() + d.ms * interval '1 millisecond' "
            "FROM unnest(%s::uuid[], %s::int[]) AS d(id, ms) WHERE t.id = d.id",
            [[p[1] for p in plan], [p[3] for p in plan]],
        )
    started = time.monotonic()
    connection.close()
    plan.sort()
    acked: set[uuid.UUID] = set()
    lost: set[uuid.UUID] = set()
    stop = threading.Event()

    def worker() -> None:
        for at, task_id, token, _ in plan:
            delay = started + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            try:
                lifecycle.ack(task_id, worker_id="worker-1", lease_token=token)
                acked.add(task_id)
            except LeaseLost:
                lost.add(task_id)
            connection.close()

    def watchdog() -> int:
        expired = 0
        while not stop.is_set():
            expired += lifecycle.expire_leases()
            connection.close()
            time.sleep(0.002)
        return expired + lifecycle.expire_leases()

    def role(index: int) -> int:
        if index == 1:
            return watchdog()
        try:
            worker()
        finally:
            stop.set()
        return 0

    _, expired = in_threads(2, role)
    assert acked | lost == {t.id for t in tasks}
    assert not acked & lost
    statuses = dict(Task.objects.values_list("id", "status"))
    assert {statuses[task_id] for task_id in acked} <= {Status.DONE}
    assert {statuses[task_id] for task_id in lost} <= {Status.RETRY}
    assert expired == len(lost)
    # History: exactly one way out of executing per task.
    exits = Counter(
        TaskEvent.objects.filter(from_status=Status.EXECUTING, kind="transition").values_list("task_id", flat=True)
    )
    assert set(exits.values()) == {1}
    assert len(exits) == count
    assert not DeadLetterTask.objects.exists()
    assert acked and lost
