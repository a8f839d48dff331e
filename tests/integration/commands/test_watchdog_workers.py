"""The watchdog forgets workers not seen for longer than the retention period."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from queues.loops import watchdog
from workers.models import Worker

pytestmark = pytest.mark.django_db


def test_workers_unseen_for_longer_than_retention_are_forgotten(settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    settings.TASKFORGE_RETENTION_DAYS = 7
    now = timezone.now()
    for name, age in [("gone-1", timedelta(days=8)), ("gone-2", timedelta(days=30)), ("recent", timedelta(days=6))]:
        Worker.objects.create(worker_id=name, last_seen_at=now - age)
    Worker.objects.create(worker_id="live", last_seen_at=now)
    monkeypatch.setattr(watchdog, "WORKER_PRUNE_BATCH", 1)
    first = watchdog.run_once()
    assert first.workers_forgotten == 1 and first.full_batch, "a full batch: pass again at once"
    assert watchdog.run_once().workers_forgotten == 1
    assert watchdog.run_once().workers_forgotten == 0
    assert set(Worker.objects.values_list("worker_id", flat=True)) == {"recent", "live"}
