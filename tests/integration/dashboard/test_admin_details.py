"""Small things an on-call engineer reads: times to the second, counts that read as English, ids on one line."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db


def test_lists_show_times_to_the_second(staff_client):
    task = TaskFactory(queue=QueueFactory(name="mail"))
    task.created_at = datetime(2026, 12, 1, 23, 21, 5, tzinfo=UTC)
    task.save(update_fields=["created_at"])
    page = staff_client.get("/admin/queues/task/").content.decode()
    assert "2026-12-01 23:21:05" in page
    assert "p.m." not in page and "a.m." not in page


def test_the_dead_letter_count_reads_as_entries(staff_client):
    queue = QueueFactory(name="mail")
    TaskFactory.create_batch(2, queue=queue, dead=True)
    page = staff_client.get("/admin/queues/deadlettertask/").content.decode()
    counts = re.findall(r"\b(\d+)\s+dead-letter (entry|entries)\b", page)
    assert ("2", "entries") in counts, counts
    assert "2 dead-letter queue" not in page
