"""The overview's history charts (dashboard.history, dashboard.charts), server-rendered SVG."""

from __future__ import annotations

import re

import pytest

from tests.factories import QueueFactory
from tests.integration.dashboard.synthetic_history import fill_a_day

pytestmark = pytest.mark.django_db


def _rows(page: str) -> dict[str, str]:
    section = page.split('id="tf-history"', 1)[1].split("</section>", 1)[0]
    return dict(re.findall(r'<tr data-queue="([^"]+)">(.*?)</tr>', section, flags=re.S))


def test_a_day_of_history_is_drawn_per_queue(staff_client):
    QueueFactory(name="emails")
    fill_a_day("emails")
    fill_a_day("reports", per_minute=20)
    page = staff_client.get("/admin/", {"history": "day"}).content.decode()
    rows = _rows(page)
    assert set(rows) == {"emails", "reports"}
    for html in rows.values():
        assert html.count("<svg") == 2
        assert "tasks per 15 minutes" in html and "latency" in html
        # 96 quarter hours, all sampled: one unbroken line per series.
        completed = re.search(r'<polyline class="tf-line-ok" points="([^"]+)"', html)
        assert completed and len(completed.group(1).split()) >= 95
    assert "<strong>last day</strong>" in page and 'href="?history=week"' in page


def test_an_unknown_range_shows_the_last_hour_and_no_history_says_so(staff_client):
    assert "No history yet" in staff_client.get("/admin/").content.decode()
    fill_a_day("emails")
    page = staff_client.get("/admin/", {"history": "fortnight"}).content.decode()
    assert "<strong>last hour</strong>" in page
    assert "tasks per minute" in _rows(page)["emails"]


def test_a_time_no_sampler_ran_is_a_gap_not_a_zero(staff_client):
    from queues.models import QueueSample

    fill_a_day("emails")
    newest = QueueSample.objects.order_by("-minute")[0].minute
    from datetime import timedelta

    QueueSample.objects.filter(
        minute__gt=newest - timedelta(minutes=40), minute__lt=newest - timedelta(minutes=20)
    ).delete()
    html = _rows(staff_client.get("/admin/").content.decode())["emails"]
    assert html.count('<polyline class="tf-line-ok"') == 2  # the line breaks where samples are missing
