"""Purge and queue deletion work in bounded, separately committed batches.

Proven with real connections: another connection holds a lock on the last
task, and while the operation waits for it the batches before it are already
committed and visible to everyone. One unbounded statement would show nothing
until it had every row.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection, connections
from django.utils import timezone

from queues import lifecycle
from queues.models import Queue, Status, Task
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def row_locked(task_id: Any) -> Iterator[None]:
    """Hold ``FOR UPDATE`` on one task from a connection of our own until the block ends."""
    params = connection.get_connection_params()
    with psycopg.connect(**params) as other:
        other.execute("SELECT 1 FROM tf_task WHERE id = %s FOR UPDATE", [task_id])
        yield
        other.rollback()


def in_background(target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = target()
        except BaseException as exc:  # reported in the test's thread
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def wait_for(condition: Callable[[], bool], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_purge_commits_batch_by_batch_and_answers_the_total():
    queue = QueueFactory(name="mail")
    early = timezone.now() - timedelta(minutes=5)
    TaskFactory.create_batch(4, queue=queue, priority=1, scheduled_at=early)
    # Last in every order a batch may find candidates in: by (status, priority,
    # scheduled_at), by newest created_at, and as stored.
    last = TaskFactory(queue=queue, status=Status.RETRY, priority=10, created_at=early - timedelta(days=1))
    TaskFactory(queue=queue, claimed=True)  # not purgeable

    with row_locked(last.id):
        thread, outcome = in_background(lambda: lifecycle.purge(queue, batch=2))
        committed = wait_for(lambda: Task.objects.filter(queue=queue, status=Status.CANCELLED).count() == 4)
        assert thread.is_alive(), outcome
        assert committed, "the first batches are committed while the last one waits for its lock"
    thread.join(30)
    assert outcome == {"result": 5}
    assert Task.objects.filter(queue=queue, status=Status.CANCELLED).count() == 5
    assert Task.objects.filter(queue=queue, status=Status.CLAIMED).count() == 1


def test_queue_delete_removes_history_in_batches_then_the_queue(admin_api):
    queue = QueueFactory(name="old")
    tasks = TaskFactory.create_batch(5, queue=queue, done=True)
    TaskFactory.create_batch(2, queue=queue, status=Status.CANCELLED, finished_at=timezone.now())

    with row_locked(tasks[0].id):
        thread, outcome = in_background(lambda: lifecycle.delete_queue(queue, batch=2))
        committed = wait_for(lambda: Task.objects.filter(queue=queue).count() == 1)
        assert thread.is_alive(), outcome
        assert committed, "every other finished task is gone, committed, while one row is busy"
        assert Queue.objects.filter(name="old").exists()
    thread.join(30)
    assert outcome == {"result": None}
    assert not Queue.objects.filter(name="old").exists()
    assert not Task.objects.filter(queue_id=queue.id).exists()


def test_queue_delete_still_refuses_a_queue_with_work_and_purge_answers_through_the_api(admin_api):
    QueueFactory(name="busy")
    queue = Queue.objects.get(name="busy")
    TaskFactory.create_batch(3, queue=queue)
    TaskFactory(queue=queue, done=True)
    refused = admin_api.delete("/queues/busy")
    assert refused.status_code == 409 and "3" in refused.json()["error"]["message"]
    assert Task.objects.filter(queue=queue, status=Status.DONE).count() == 1, "nothing deleted before the refusal"
    assert admin_api.post("/queues/busy/purge", format="json").json() == {"purged": 3}
    assert admin_api.delete("/queues/busy").status_code == 204
