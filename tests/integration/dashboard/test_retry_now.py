"""lifecycle.retry_now: the inspector's "retry now" for tasks waiting out a backoff."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from queues import lifecycle
from queues.models import Status, Task, TaskEvent
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_retry_now_makes_a_backing_off_task_pending_and_claimable_now(queue):
    later = timezone.now() + timedelta(hours=1)
    task = TaskFactory(queue=queue, status=Status.RETRY, attempts=1, scheduled_at=later)

    moved = lifecycle.retry_now([task.id], actor="alice")

    assert [row["id"] for row in moved] == [task.id]
    task.refresh_from_db()
    assert task.status == Status.PENDING
    assert task.scheduled_at <= timezone.now()
    event = TaskEvent.objects.get(task_id=task.id)
    assert (event.from_status, event.to_status, event.detail) == ("retry", "pending", "retried now by alice")
    claimed = lifecycle.claim("w1", [queue.id], 1)
    assert [row["id"] for row in claimed] == [task.id]


@pytest.mark.parametrize("status", [Status.PENDING, Status.CLAIMED, Status.DONE, Status.DEAD, Status.CANCELLED])
def test_retry_now_skips_tasks_that_are_not_waiting_to_retry(queue, status):
    task = TaskFactory(queue=queue, status=status)

    assert lifecycle.retry_now([task.id]) == []

    assert Task.objects.get(pk=task.id).status == status
    assert not TaskEvent.objects.filter(task_id=task.id).exists()
