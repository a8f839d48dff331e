"""The opt-in ``kind`` families of /metrics (TASKFORGE_METRICS_KIND_LABEL)."""

from __future__ import annotations

import pytest
from django.test import Client

from queues import lifecycle
from queues.telemetry import counters
from tests.factories import QueueFactory
from tests.integration.observability.scrape import parse, value

pytestmark = pytest.mark.django_db

BY_KIND = ("taskforge_tasks_enqueued_by_kind", "taskforge_tasks_completed_by_kind")


@pytest.fixture(autouse=True)
def fresh_outbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(counters, "_outbox", counters._Outbox())


def _scrape() -> str:
    response = Client().get("/metrics")
    assert response.status_code == 200
    return response.content.decode()


def _run(django_capture_on_commit_callbacks):  # type: ignore[no-untyped-def]
    """Enqueue typed and untyped tasks, ack one, cancel one, as real commits would report them."""
    queue = QueueFactory(name="mail")
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.enqueue(
            queue,
            [
                lifecycle.NewTask({}, kind="emails.send"),
                lifecycle.NewTask({}, kind="emails.send", priority=9),
                lifecycle.NewTask({}, priority=10),
            ],
        )
    with django_capture_on_commit_callbacks(execute=True):
        (row,) = lifecycle.claim("w-1", [queue.id], 1)
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.ack(row["id"], worker_id="w-1")
    (second,) = lifecycle.fetch_rows(
        "SELECT id FROM tf_task WHERE queue_id = %s AND kind IS NOT NULL AND status = 'pending'", [queue.id]
    )
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.cancel(queue, second["id"])


def test_off_by_default_metrics_stay_labelled_by_queue_only(django_capture_on_commit_callbacks):
    _run(django_capture_on_commit_callbacks)
    text = _scrape()
    assert not any(name in text for name in BY_KIND)
    samples = parse(text)
    assert value(samples, "taskforge_tasks_enqueued_total", queue="mail") == 3


def test_when_on_typed_tasks_are_also_counted_by_kind(settings, django_capture_on_commit_callbacks):
    settings.TASKFORGE_METRICS_KIND_LABEL = True
    _run(django_capture_on_commit_callbacks)
    samples = parse(_scrape())
    assert value(samples, "taskforge_tasks_enqueued_by_kind_total", queue="mail", kind="emails.send") == 2
    done = value(samples, "taskforge_tasks_completed_by_kind_total", queue="mail", kind="emails.send", status="done")
    cancelled = value(
        samples, "taskforge_tasks_completed_by_kind_total", queue="mail", kind="emails.send", status="cancelled"
    )
    assert (done, cancelled) == (1, 1)
    # The per-queue families are unchanged and count every task, typed or not.
    assert value(samples, "taskforge_tasks_enqueued_total", queue="mail") == 3
