"""Cancel of running tasks against real Postgres: expiry semantics and races with the worker's ack or nack."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from queues import lifecycle
from queues.errors import InvalidTransition
from queues.models import DeadLetterTask, Queue, Status, Task
from tests.factories import QueueFactory

pytestmark = pytest.mark.django_db


def _claimed(queue: Queue, **new_task: object) -> dict:
    lifecycle.enqueue(queue, [lifecycle.NewTask({}, **new_task)])  # type: ignore[arg-type]
    (row,) = lifecycle.claim("w-1", [queue.id], 1)
    return row


def test_a_lease_expiry_of_a_task_asked_to_stop_cancels_it():
    queue = QueueFactory(name="q", max_retries=3)
    row = _claimed(queue)
    marked = lifecycle.request_cancel(queue, row["id"])
    assert marked["cancel_requested"] is True and marked["status"] == Status.CLAIMED
    Task.objects.filter(pk=row["id"]).update(lease_expires_at=timezone.now() - timedelta(minutes=5))
    assert lifecycle.expire_leases() == 1
    task = Task.objects.get(pk=row["id"])
    assert task.status == Status.CANCELLED and task.finished_at is not None
    assert task.last_error.startswith("lease expired")
    assert not DeadLetterTask.objects.filter(pk=row["id"]).exists()


def test_a_timed_out_task_asked_to_stop_is_cancelled_not_retried():
    queue = QueueFactory(name="q")
    row = _claimed(queue, timeout_seconds=5)
    lifecycle.request_cancel(queue, row["id"])
    Task.objects.filter(pk=row["id"]).update(
        claimed_at=timezone.now() - timedelta(seconds=60), lease_expires_at=timezone.now() - timedelta(seconds=55)
    )
    assert lifecycle.expire_leases() == 1
    task = Task.objects.get(pk=row["id"])
    assert (task.status, task.last_error) == (Status.CANCELLED, "execution timed out after 5 s")


def test_a_nack_with_retry_false_of_a_task_asked_to_stop_is_cancelled_not_dead():
    queue = QueueFactory(name="q")
    row = _claimed(queue)
    lifecycle.request_cancel(queue, row["id"])
    moved = lifecycle.nack(row["id"], worker_id="w-1", lease_token=row["lease_token"], error="stop", retry=False)
    assert moved["status"] == Status.CANCELLED
    assert not DeadLetterTask.objects.exists()


def test_a_request_is_refused_for_a_task_that_is_not_running():
    queue = QueueFactory(name="q")
    ((pending, _),) = lifecycle.enqueue(queue, [lifecycle.NewTask({})])
    with pytest.raises(InvalidTransition):
        lifecycle.request_cancel(queue, pending["id"])
    assert Task.objects.get(pk=pending["id"]).cancel_requested is False
    row, at_once = lifecycle.cancel_or_request(queue, pending["id"])
    assert at_once and row["status"] == Status.CANCELLED
    with pytest.raises(InvalidTransition):
        lifecycle.cancel_or_request(queue, pending["id"])


def test_a_replayed_task_starts_again_without_the_request():
    """A cancel request belongs to the attempt's life; a dead task replayed is a new life."""
    queue = QueueFactory(name="q")
    row = _claimed(queue, max_retries=0)
    lifecycle.nack(row["id"], worker_id="w-1", lease_token=row["lease_token"], error="x")
    assert Task.objects.get(pk=row["id"]).status == Status.DEAD
    assert lifecycle.replay(queue, row["id"])["cancel_requested"] is False


# --- races: real transactions on two connections --------------------------------------------------


def _race(first: Callable[[], object], second: Callable[[], object]) -> list[object]:
    """Run both at once on their own connections; each outcome is its return value or its exception."""
    outcomes: list[object] = [None, None]
    start = threading.Barrier(2)

    def run(index: int, work: Callable[[], object]) -> None:
        try:
            start.wait()
            outcomes[index] = work()
        except Exception as exc:  # the outcome under test
            outcomes[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return outcomes


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(15))
def test_an_ack_racing_a_cancel_is_done_and_the_cancel_answers_consistently(round_):
    queue = QueueFactory(name=f"race{round_}")
    row = _claimed(queue)
    ack = lambda: lifecycle.ack(row["id"], worker_id="w-1", lease_token=row["lease_token"])  # noqa: E731
    cancel = lambda: lifecycle.cancel_or_request(queue, row["id"])  # noqa: E731
    acked, cancelled = _race(ack, cancel) if round_ % 2 else reversed(_race(cancel, ack))
    assert isinstance(acked, dict) and acked["status"] == Status.DONE
    task = Task.objects.get(pk=row["id"])
    assert task.status == Status.DONE  # an ack always wins: the work was done
    if isinstance(cancelled, InvalidTransition):
        assert task.cancel_requested is False and "done" in str(cancelled)  # the ack committed first
    else:
        answered, at_once = cancelled
        assert at_once is False and answered["cancel_requested"] is True  # asked while it still ran
        assert task.cancel_requested is True


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(15))
def test_a_nack_racing_a_cancel_never_leaves_a_retry_behind(round_):
    """Whichever commits first, a task whose cancel was answered ends cancelled, never retried."""
    queue = QueueFactory(name=f"race{round_}", max_retries=5)
    row = _claimed(queue)
    nack = lambda: lifecycle.nack(row["id"], worker_id="w-1", lease_token=row["lease_token"], error="e")  # noqa: E731
    cancel = lambda: lifecycle.cancel_or_request(queue, row["id"])  # noqa: E731
    nacked, cancelled = _race(nack, cancel) if round_ % 2 else reversed(_race(cancel, nack))
    assert not isinstance(cancelled, Exception), cancelled
    assert isinstance(nacked, dict), nacked  # the cancel never takes the lease: the nack is always accepted
    assert Task.objects.get(pk=row["id"]).status == Status.CANCELLED
