"""Backoff as the nack and expiry paths really schedule it (the pure formula is in tests/unit/queues/test_backoff.py).

``delay_ms = min(retry_base_ms * 2^n + rand(0, retry_base_ms), retry_max_delay_ms)``, n = 0 for the
first retry.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from queues import lifecycle
from queues.models import Status, Task
from tests.factories import QueueFactory, TaskFactory


def delay_of(task_id) -> timedelta:
    """scheduled_at minus the moment of the move (both written by the same statement's now())."""
    task = Task.objects.get(pk=task_id)
    assert task.status == Status.RETRY
    return task.scheduled_at - task.updated_at


def ms(value: int) -> timedelta:
    return timedelta(milliseconds=value)


@pytest.mark.django_db
@pytest.mark.parametrize("attempts", [1, 2, 3, 4])
def test_nack_schedules_by_the_backoff(attempts):
    base = 10_000
    queue = QueueFactory(retry_base_ms=base, retry_max_delay_ms=10**9)
    task = TaskFactory(queue=queue, claimed=True, attempts=attempts, max_retries=10)
    lifecycle.nack(task.id, worker_id="worker-1", error="x")
    n = attempts - 1
    assert ms(base * 2**n) <= delay_of(task.id) <= ms(base * 2**n + base)


@pytest.mark.django_db
@pytest.mark.parametrize("attempts", [1, 3])
def test_lease_expiry_schedules_by_the_backoff(attempts):
    base = 20_000
    queue = QueueFactory(retry_base_ms=base, retry_max_delay_ms=10**9)
    task = TaskFactory(queue=queue, expired_lease=True, attempts=attempts, max_retries=10)
    assert lifecycle.expire_leases() == 1
    n = attempts - 1
    assert ms(base * 2**n) <= delay_of(task.id) <= ms(base * 2**n + base)


@pytest.mark.django_db
def test_scheduled_delay_is_capped_by_the_queue():
    queue = QueueFactory(retry_base_ms=1000, retry_max_delay_ms=5000)
    task = TaskFactory(queue=queue, claimed=True, attempts=10, max_retries=20)
    lifecycle.nack(task.id, worker_id="worker-1", error="x")
    assert delay_of(task.id) == ms(5000)


@pytest.mark.django_db
def test_retry_after_seconds_is_exact_and_not_capped():
    queue = QueueFactory(retry_base_ms=1000, retry_max_delay_ms=1000)
    task = TaskFactory(queue=queue, claimed=True)
    lifecycle.nack(task.id, worker_id="worker-1", error="x", retry_after_seconds=90)
    assert delay_of(task.id) == timedelta(seconds=90)
    zero = TaskFactory(queue=queue, claimed=True)
    lifecycle.nack(zero.id, worker_id="worker-1", error="x", retry_after_seconds=0)
    assert delay_of(zero.id) == timedelta(0)


@pytest.mark.django_db
def test_nacks_that_fail_together_are_spread_out():
    queue = QueueFactory(retry_base_ms=60_000, retry_max_delay_ms=10**9)
    tasks = TaskFactory.create_batch(20, queue=queue, claimed=True)
    lifecycle.nack_many("worker-1", [lifecycle.NackItem(t.id, "down", t.lease_token) for t in tasks])
    delays = {delay_of(t.id) for t in tasks}
    assert len(delays) > 10
    assert all(ms(60_000) <= d <= ms(120_000) for d in delays)


@pytest.mark.django_db
def test_retry_is_claimable_only_after_its_backoff():
    queue = QueueFactory(retry_base_ms=3_600_000)
    task = TaskFactory(queue=queue, claimed=True)
    lifecycle.nack(task.id, worker_id="worker-1", error="x")
    assert lifecycle.promote_due() == []
    assert lifecycle.claim("w", [queue.id], 1) == []
    Task.objects.filter(pk=task.id).update(scheduled_at=timezone.now() - timedelta(minutes=5))
    assert len(lifecycle.promote_due()) == 1
    assert [row["id"] for row in lifecycle.claim("w", [queue.id], 1)] == [task.id]
