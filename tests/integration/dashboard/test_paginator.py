"""The changelists never COUNT(*) the whole task table."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard import paginator
from queues.models import Task
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db

URL = "/admin/queues/task/"


@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scale the thresholds down so a dozen rows behave like a million."""
    monkeypatch.setattr(paginator, "EXACT_UP_TO", 5)
    monkeypatch.setattr(paginator, "CLEARLY_MORE", 8)


def _analyze() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE tf_task")


def _counts(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries if "COUNT(" in q["sql"].upper()]


def test_unfiltered_list_shows_postgres_estimate_without_counting(staff_client, small_caps):
    TaskFactory.create_batch(12, queue=QueueFactory(name="mail"))
    _analyze()

    with CaptureQueriesContext(connection) as queries:
        response = staff_client.get(URL)

    cl = response.context["cl"]
    assert cl.result_count == 12  # reltuples after ANALYZE
    assert cl.paginator.estimated
    assert _counts(queries) == []
    assert len(cl.result_list) == 12


def test_a_short_filtered_list_is_counted_exactly_with_a_capped_count(staff_client, small_caps):
    queue = QueueFactory(name="mail")
    TaskFactory.create_batch(3, queue=queue, status="retry", attempts=1)
    TaskFactory.create_batch(9, queue=queue)
    _analyze()

    with CaptureQueriesContext(connection) as queries:
        response = staff_client.get(URL, {"status__exact": "retry"})

    assert response.context["cl"].result_count == 3
    assert not response.context["cl"].paginator.estimated
    (count_sql,) = _counts(queries)
    assert "LIMIT 6" in count_sql  # stops after EXACT_UP_TO + 1 rows, whatever the table holds


def test_a_long_filtered_list_shows_an_estimate(staff_client, small_caps):
    TaskFactory.create_batch(12, queue=QueueFactory(name="mail"))
    _analyze()
    response = staff_client.get(URL, {"status__exact": "pending"})
    cl = response.context["cl"]
    assert cl.paginator.estimated and cl.result_count >= 6


def test_a_page_past_an_overestimate_is_empty_not_an_error(staff_client, small_caps, monkeypatch):
    from dashboard.admin.tasks import TaskAdmin

    monkeypatch.setattr(TaskAdmin, "list_per_page", 5)
    TaskFactory.create_batch(12, queue=QueueFactory(name="mail"))
    _analyze()
    Task.objects.filter(pk__in=Task.objects.values("pk")[:10]).delete()  # the estimate is now stale

    response = staff_client.get(URL, {"p": "3"})

    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []
