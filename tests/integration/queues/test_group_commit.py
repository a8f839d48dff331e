"""Group commit of single enqueues (queues.lifecycle.grouped), with real threads on real Postgres.

The first enqueue's statement is held in flight by a lock it needs: a second
connection holds the queue row ``FOR UPDATE``, which the insert's foreign-key
check (``FOR KEY SHARE``) waits for. Enqueues that arrive meanwhile wait for
it and then go together as one statement: one transaction, so one
``created_at`` (Postgres' ``now()`` is the transaction's start).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.db import connection, connections, transaction

from queues import lifecycle
from queues.errors import QueueNotFound
from queues.lifecycle import grouped
from queues.models import Queue, Task
from taskforge.http.middleware import request_id_var
from tests import live
from tests.factories import QueueFactory

pytestmark = pytest.mark.django_db(transaction=True)

FOLLOWERS = 4


@contextmanager
def queue_row_locked(queue: Queue) -> Iterator[psycopg.Connection[Any]]:
    """Another session holds the queue row for update: an insert into the queue waits at its FK check."""
    with psycopg.connect(live.test_database_url()) as other:
        other.execute("SELECT 1 FROM tf_queue WHERE id = %s FOR UPDATE", [queue.id])
        yield other


def _waiting_behind_the_leader(queue: Queue) -> int:
    with grouped._lock:  # the test's only look inside: how many requests queue behind the one in flight
        return sum(len(waiters) for key, waiters in grouped._waiting.items() if key[0] == queue.id)


def _start(target: Callable[[], Any], results: dict[str, Any], name: str) -> threading.Thread:
    def run() -> None:
        try:
            results[name] = target()
        except BaseException as exc:  # checked by the test, in its own thread
            results[name] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _leader_then_followers(queue: Queue, enqueue: Callable[[str], Any]) -> tuple[dict[str, Any], Callable[[], None]]:
    """Start one enqueue that blocks in its statement, then FOLLOWERS more; return their results and a joiner."""
    results: dict[str, Any] = {}
    threads = [_start(lambda: enqueue("leader"), results, "leader")]
    _until(lambda: _lock_waiters() == 1)
    for index in range(FOLLOWERS):
        name = f"follower-{index}"
        threads.append(_start(lambda name=name: enqueue(name), results, name))  # type: ignore[misc]
    _until(lambda: _waiting_behind_the_leader(queue) == FOLLOWERS)

    def join() -> None:
        for thread in threads:
            thread.join(30)
        assert not any(thread.is_alive() for thread in threads)

    return results, join


def _lock_waiters() -> int:
    """Sessions of this test database waiting for a lock (the enqueues held at the queue row)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        (count,) = cursor.fetchone()
    return int(count)


def _plain_enqueue(queue: Queue) -> Callable[[str], tuple[lifecycle.Row, bool]]:
    """An enqueue into ``queue`` without a key, its payload naming who made it."""

    def enqueue(name: str) -> tuple[lifecycle.Row, bool]:
        return lifecycle.enqueue_single(queue, lifecycle.NewTask(payload={"from": name}))

    return enqueue


def test_requests_arriving_while_a_statement_runs_share_the_next_one():
    queue = QueueFactory(name="grouped")
    connection.close()

    with queue_row_locked(queue) as other:
        results, join = _leader_then_followers(queue, _plain_enqueue(queue))
        other.rollback()  # the leader's statement goes on
    join()

    for name, (row, created) in results.items():  # each request gets its own task, created, as alone
        assert created is True
        assert row["payload"] == {"from": name}
        assert row["status"] == "pending"
    stored = {task.payload["from"]: task for task in Task.objects.filter(queue=queue)}
    assert set(stored) == set(results)
    assert {results[name][0]["id"] for name in stored} == {task.id for task in stored.values()}
    followers = {stored[name].created_at for name in stored if name != "leader"}
    assert len(followers) == 1  # one statement, one transaction for the four that waited
    assert stored["leader"].created_at not in followers


def test_a_failed_shared_statement_fails_every_request_it_carried_and_writes_nothing():
    queue = QueueFactory(name="grouped-gone")
    connection.close()

    with queue_row_locked(queue) as other:
        results, join = _leader_then_followers(queue, _plain_enqueue(queue))
        other.execute("DELETE FROM tf_queue WHERE id = %s", [queue.id])
        other.commit()  # the queue is gone under the statement in flight and the one waiting
    join()

    assert set(results) == {"leader", *(f"follower-{i}" for i in range(FOLLOWERS))}
    for outcome in results.values():
        assert isinstance(outcome, QueueNotFound)
    assert not Task.objects.filter(queue_id=queue.id).exists()
    assert not grouped._waiting  # the queue is free for the next enqueue


def test_each_request_logs_its_own_transition_with_its_own_request_id(stdout_log):
    queue = QueueFactory(name="grouped-logs")
    connection.close()

    def enqueue(name: str) -> tuple[lifecycle.Row, bool]:
        request_id_var.set(f"req-{name}")  # this thread's request
        return lifecycle.enqueue_single(queue, lifecycle.NewTask(payload={"from": name}))

    with queue_row_locked(queue) as other:
        results, join = _leader_then_followers(queue, enqueue)
        other.rollback()
    join()

    logged = {line["task_id"]: line["request_id"] for line in stdout_log() if line.get("event") == "task.transition"}
    assert logged == {str(row["id"]): f"req-{name}" for name, (row, _) in results.items()}


def test_an_enqueue_inside_a_transaction_is_part_of_it():
    queue = QueueFactory(name="grouped-atomic")
    with pytest.raises(RuntimeError), transaction.atomic():
        row, created = lifecycle.enqueue_single(queue, lifecycle.NewTask(payload={"n": 1}))
        assert created and Task.objects.filter(id=row["id"]).exists()
        raise RuntimeError("roll it back")
    assert not Task.objects.filter(queue=queue).exists()


def test_an_enqueue_with_an_idempotency_key_does_not_wait_for_a_group():
    queue = QueueFactory(name="grouped-keys")
    connection.close()
    results: dict[str, Any] = {}
    with queue_row_locked(queue) as other:
        blocked = _start(lambda: lifecycle.enqueue_single(queue, lifecycle.NewTask(payload={"n": 0})), results, "plain")
        _until(lambda: _lock_waiters() == 1)
        key = uuid.uuid4().hex
        keyed = _start(
            lambda: lifecycle.enqueue_single(
                queue, lifecycle.NewTask(payload={"n": 1}, idempotency_key=key, fingerprint="f")
            ),
            results,
            "keyed",
        )
        # It runs its own statement (blocked at the same lock), not queued behind the plain one.
        _until(lambda: _lock_waiters() == 2)
        assert _waiting_behind_the_leader(queue) == 0
        other.rollback()
    blocked.join(30)
    keyed.join(30)
    assert results["plain"][1] is True and results["keyed"][1] is True
    assert results["keyed"][0]["idempotency_key"] == key
