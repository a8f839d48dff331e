"""The history charts in headless Chromium: a day of synthetic history drawn on the overview.

Screenshots go to ``docs/screenshots/history.tmp.png`` (ignored by git); the
docs' image is a copy of a good run.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from tests.factories import QueueFactory
from tests.integration.dashboard.synthetic_history import fill_a_day
from tests.integration.dashboard.test_browser import SCREENSHOTS, browser_page  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_overview_draws_a_day_of_history(live_stack, browser_page):  # noqa: F811
    from playwright.sync_api import expect

    page = browser_page
    call_command("collectstatic", "--no-input", "-v", "0")
    QueueFactory(name="emails")
    QueueFactory(name="reports")
    fill_a_day("emails")
    fill_a_day("reports", per_minute=40)
    get_user_model().objects.create_superuser("oncall", "oncall@example.com", "correct-horse")
    base = live_stack.start_api(extra_env={"DJANGO_SECURE_COOKIES": "false"})

    page.goto(f"{base}/admin/")
    expect(page).to_have_url(re.compile(r"/admin/login/"))
    page.fill("#id_username", "oncall")
    page.fill("#id_password", "correct-horse")
    page.click("input[type=submit]")
    page.click("#tf-history >> text=last day")
    expect(page).to_have_url(re.compile(r"history=day"))
    charts = page.locator('#tf-history tr[data-queue="emails"] svg')
    expect(charts).to_have_count(2)
    completed = page.locator('#tf-history tr[data-queue="emails"] polyline.tf-line-ok')
    expect(completed).to_be_visible()
    box = completed.bounding_box()
    assert box is not None and box["width"] > 300  # drawn across the whole chart, not a dot
    page.locator("#tf-history").scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#tf-history").screenshot(path=str(SCREENSHOTS / "history.tmp.png"))

    # The schedules page, with its next five fire times, in the same session.
    from queues.models import Schedule

    Schedule.objects.create(name="nightly-report", queue_id=_queue_id("reports"), cron="0 3 * * *",
                            timezone="Europe/Berlin", payload={"report": "daily"}, kind="reports.nightly")  # fmt: skip
    Schedule.objects.create(name="heartbeat-email", queue_id=_queue_id("emails"), every_seconds=300, payload={})
    page.goto(f"{base}/admin/queues/schedule/")
    expect(page.locator("#result_list")).to_contain_text("nightly-report")
    expect(page.locator("#result_list")).to_contain_text("heartbeat-email")
    page.screenshot(path=str(SCREENSHOTS / "schedules.tmp.png"))


def _queue_id(name: str):  # type: ignore[no-untyped-def]
    from queues.models import Queue

    return Queue.objects.get(name=name).pk
