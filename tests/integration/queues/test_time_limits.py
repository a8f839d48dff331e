"""Execution time limits (``timeout_seconds``) against real Postgres.

Inside a test's transaction Postgres' ``now()`` stands still, so time passing is
written into the rows (an earlier ``claimed_at``) rather than slept.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F

from queues import lifecycle
from queues.errors import LeaseLost
from queues.models import DeadLetterTask, Queue, Status, Task, TaskEvent
from tests.factories import QueueFactory

pytestmark = pytest.mark.django_db


def _claimed(queue: Queue, *, timeout_seconds: int | None, max_retries: int | None = None) -> dict:
    lifecycle.enqueue(queue, [lifecycle.NewTask({}, timeout_seconds=timeout_seconds, max_retries=max_retries)])
    (row,) = lifecycle.claim("w-1", [queue.id], 1)
    return row


def _backdate(task_id: object, seconds: float, *, lease_too: bool = True) -> None:
    """As if the attempt had started ``seconds`` earlier (and, unless heartbeats kept it up, its lease too)."""
    shift = timedelta(seconds=seconds)
    changes = {"claimed_at": F("claimed_at") - shift}
    if lease_too:
        changes["lease_expires_at"] = F("lease_expires_at") - shift
    Task.objects.filter(pk=task_id).update(**changes)


def test_the_first_lease_ends_at_the_time_limit_when_that_comes_first(settings):
    settings.TASKFORGE_HEARTBEAT_TIMEOUT = 30
    queue = QueueFactory(name="q")
    short = _claimed(queue, timeout_seconds=5)
    assert short["lease_expires_at"] == short["claimed_at"] + timedelta(seconds=5)
    long = _claimed(queue, timeout_seconds=3600)
    assert long["lease_expires_at"] == long["claimed_at"] + timedelta(seconds=30)
    unlimited = _claimed(queue, timeout_seconds=None)
    assert unlimited["lease_expires_at"] == unlimited["claimed_at"] + timedelta(seconds=30)


def test_heartbeats_never_extend_a_lease_past_the_time_limit(settings):
    settings.TASKFORGE_HEARTBEAT_TIMEOUT = 30
    queue = QueueFactory(name="q")
    row = _claimed(queue, timeout_seconds=100)
    beat = lifecycle.heartbeat(row["id"], worker_id="w-1", lease_token=row["lease_token"])
    assert beat["lease_expires_at"] == beat["claimed_at"] + timedelta(seconds=30)  # far from the limit
    _backdate(row["id"], 90, lease_too=False)  # 90 s of work, heartbeats all along
    beat = lifecycle.heartbeat(row["id"], worker_id="w-1", lease_token=row["lease_token"])
    assert beat["lease_expires_at"] == beat["claimed_at"] + timedelta(seconds=100)  # capped: 10 s left, not 30
    # Without a limit, the same heartbeat extends by the full heartbeat timeout.
    free = _claimed(queue, timeout_seconds=None)
    _backdate(free["id"], 90, lease_too=False)
    beat = lifecycle.heartbeat(free["id"], worker_id="w-1", lease_token=free["lease_token"])
    assert beat["lease_expires_at"] == beat["claimed_at"] + timedelta(seconds=120)


def test_past_the_limit_the_lease_is_lost_and_the_watchdog_fails_the_attempt(settings):
    settings.TASKFORGE_HEARTBEAT_TIMEOUT = 30
    queue = QueueFactory(name="q", max_retries=3)
    row = _claimed(queue, timeout_seconds=5)
    _backdate(row["id"], 6)
    with pytest.raises(LeaseLost):
        lifecycle.heartbeat(row["id"], worker_id="w-1", lease_token=row["lease_token"])
    with pytest.raises(LeaseLost):
        lifecycle.ack(row["id"], worker_id="w-1", lease_token=row["lease_token"])
    assert lifecycle.expire_leases() == 1
    task = Task.objects.get(pk=row["id"])
    assert task.status == Status.RETRY
    assert task.last_error == "execution timed out after 5 s"
    event = TaskEvent.objects.filter(task_id=row["id"]).latest("id")
    assert (event.from_status, event.to_status, event.detail) == ("claimed", "retry", task.last_error)


def test_a_timed_out_last_attempt_is_dead_and_in_the_dlq(settings):
    queue = QueueFactory(name="q")
    row = _claimed(queue, timeout_seconds=2, max_retries=0)
    _backdate(row["id"], 3)
    assert lifecycle.expire_leases() == 1
    task = Task.objects.get(pk=row["id"])
    assert task.status == Status.DEAD
    assert DeadLetterTask.objects.get(pk=row["id"]).last_error == "execution timed out after 2 s"


def test_a_silent_worker_within_the_limit_is_still_a_lease_expiry(settings):
    settings.TASKFORGE_HEARTBEAT_TIMEOUT = 30
    queue = QueueFactory(name="q")
    row = _claimed(queue, timeout_seconds=600)
    _backdate(row["id"], 31)  # no heartbeat for 31 s, well within the 600 s limit
    assert lifecycle.expire_leases() == 1
    assert Task.objects.get(pk=row["id"]).last_error.startswith("lease expired: no heartbeat within 30s")


def test_the_limit_holds_for_every_attempt_from_its_own_claim(settings):
    settings.TASKFORGE_HEARTBEAT_TIMEOUT = 30
    queue = QueueFactory(name="q", retry_base_ms=1, retry_max_delay_ms=1)
    row = _claimed(queue, timeout_seconds=10)
    _backdate(row["id"], 11)
    assert lifecycle.expire_leases() == 1
    Task.objects.filter(pk=row["id"]).update(scheduled_at=F("scheduled_at") - timedelta(minutes=1))
    lifecycle.promote_due()
    (again,) = lifecycle.claim("w-2", [queue.id], 1)
    assert again["attempts"] == 2
    assert again["lease_expires_at"] == again["claimed_at"] + timedelta(seconds=10)
