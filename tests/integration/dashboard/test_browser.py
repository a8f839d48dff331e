"""The dashboard end to end in headless Chromium, against the production server.

The API runs as in production (gunicorn + uvicorn worker, ``taskforge.asgi``),
because the live overview needs the ASGI stream. Tasks are enqueued, claimed,
acked and killed through the HTTP API while the browser watches.

Screenshots go to ``docs/screenshots/<page>.tmp.png`` (ignored by git); the
docs' images are copies of a good run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from queues.apikeys import create_key
from queues.models import Status, Task
from tests.browser import launch_chromium, sync_playwright_or_skip
from tests.factories import QueueFactory
from workers.models import Worker

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(__file__).resolve().parents[3] / "docs" / "screenshots"
TIMEOUT_MS = 15_000


@pytest.fixture
def browser_page(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    with sync_playwright_or_skip(monkeypatch) as playwright:
        browser = launch_chromium(playwright)
        context = browser.new_context(viewport={"width": 1360, "height": 820})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        try:
            yield page
        finally:
            context.close()
            browser.close()


def _shot(page, name: str, *, full_page: bool = False) -> None:  # type: ignore[no-untyped-def]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.tmp.png"), full_page=full_page)


def test_on_call_engineer_watches_filters_and_replays(live_stack, browser_page):
    page = browser_page
    from playwright.sync_api import expect

    # The server serves the admin's CSS and the overview script from collected static files.
    call_command("collectstatic", "--no-input", "-v", "0")
    QueueFactory(name="emails")
    QueueFactory(name="reports", rate_limit=50)
    get_user_model().objects.create_superuser("oncall", "oncall@example.com", "correct-horse")
    _, admin_key = create_key("browser-admin", "admin")
    _, worker_key = create_key("browser-worker", "worker")
    base = live_stack.start_api(extra_env={"DJANGO_SECURE_COOKIES": "false"})
    api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin_key}"}, timeout=10)
    worker = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {worker_key}"}, timeout=10)

    # 1. Log in: the admin asks for the staff login first.
    page.goto(f"{base}/admin/")
    expect(page).to_have_url(re.compile(r"/admin/login/"))
    page.fill("#id_username", "oncall")
    page.fill("#id_password", "correct-horse")
    page.click("input[type=submit]")
    expect(page.locator("#tf-live")).to_have_text("live")

    # 2. The overview follows the queue without a reload.
    pending = page.locator('tr[data-queue="emails"] [data-field="depth.pending"]')
    expect(pending).to_have_text("0")
    page.evaluate("window.__not_reloaded = true")
    for n in range(5):
        created = api.post("/queues/emails/tasks", json={"payload": {"to": f"user{n}@example.com"}})
        assert created.status_code == 201, created.text
    expect(pending).to_have_text("5")
    claimed = worker.post("/workers/claim", json={"worker_id": "mailer-1", "queue": "emails", "max_tasks": 2})
    for task in claimed.json()["tasks"]:
        acked = worker.post(
            "/workers/ack", json={"task_id": task["id"], "worker_id": "mailer-1", "lease_token": task["lease_token"]}
        )
        assert acked.status_code == 200, acked.text
    expect(page.locator('tr[data-queue="emails"] [data-field="depth.done"]')).to_have_text("2")
    expect(pending).to_have_text("3")
    assert page.evaluate("window.__not_reloaded") is True
    expect(page.locator('tr[data-queue="emails"] svg.tf-spark polyline')).to_have_count(1)
    _shot(page, "overview")

    # 3. Two tasks die (nack without retry) and land in the dead-letter queue.
    dead_ids = []
    for n in range(2):
        created = api.post("/queues/reports/tasks", json={"payload": {"report": n}})
        assert created.status_code == 201
    for task in worker.post(
        "/workers/claim", json={"worker_id": "reporter-1", "queue": "reports", "max_tasks": 2}
    ).json()["tasks"]:
        nacked = worker.post(
            "/workers/nack",
            json={
                "task_id": task["id"],
                "worker_id": "reporter-1",
                "lease_token": task["lease_token"],
                "error": "ValueError: report template missing",
                "retry": False,
            },
        )
        assert nacked.json()["status"] == "dead", nacked.text
        dead_ids.append(task["id"])
    expect(page.locator('tr[data-queue="reports"] [data-field="dlq_depth"]')).to_have_text("2")

    # 4. The inspector: filter by queue, then by status, from the filter sidebar.
    page.click('tr[data-queue="emails"] a[data-link="queue"]')
    expect(page.locator("#result_list tbody tr")).to_have_count(5)
    page.locator("#changelist-filter").get_by_role("link", name="Pending", exact=True).click()
    expect(page.locator("#result_list tbody tr")).to_have_count(3)
    page.fill('input[name="claimed_by__exact"]', "mailer-1")
    page.locator('input[name="claimed_by__exact"]').press("Enter")
    expect(page.locator("#result_list tbody tr")).to_have_count(0)
    page.goto(f"{base}/admin/queues/task/?claimed_by__exact=mailer-1")
    expect(page.locator("#result_list tbody tr")).to_have_count(2)
    _shot(page, "inspector")
    page.locator("#result_list tbody tr th a").first.click()
    expect(page.locator("table.tf-history")).to_contain_text("done")
    _shot(page, "task-detail", full_page=True)

    # 5. The dead-letter browser: select both, replay, confirm.
    page.goto(f"{base}/admin/queues/deadlettertask/")
    expect(page.locator("#result_list tbody tr")).to_have_count(2)
    expect(page.locator("#result_list")).to_contain_text("report template missing")
    _shot(page, "dead-letters")
    page.check("#action-toggle")
    page.select_option('select[name="action"]', "replay_selected")
    page.click('button[name="index"]')
    expect(page.locator(".tf-question")).to_contain_text("Replay these dead tasks (2)?")
    _shot(page, "replay-confirm")
    page.click('input[type=submit][value="Yes, replay"]')
    expect(page.locator("ul.messagelist")).to_contain_text("Replayed 2 task(s)")
    expect(page.locator("#result_list tbody tr")).to_have_count(0)
    assert set(Task.objects.filter(pk__in=dead_ids).values_list("status", flat=True)) == {Status.PENDING}

    # ...and the inspector shows them pending again.
    page.goto(f"{base}/admin/queues/task/?status__exact=pending&q={dead_ids[0]}")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list tbody tr td.field-status")).to_have_text("Pending")

    # 6. The workers page: who holds what, and who went quiet while holding a task.
    for worker_id in ("mailer-2", "mailer-3"):
        held = worker.post("/workers/claim", json={"worker_id": worker_id, "queue": "emails"}).json()["tasks"]
        assert len(held) == 1
    # mailer-2 claimed two minutes ago and never sent a heartbeat (set-up: its registry row only).
    Worker.objects.filter(worker_id="mailer-2").update(last_claim_at=timezone.now() - timedelta(minutes=2))
    page.goto(f"{base}/admin/workers/")
    expect(page.locator('tr[data-worker="mailer-1"]')).to_be_visible()
    expect(page.locator('tr[data-worker="reporter-1"]')).to_be_visible()
    expect(page.locator('tr[data-worker="mailer-2"].tf-stale .tf-stale-badge')).to_have_text("stale")
    expect(page.locator('tr[data-worker="mailer-3"]')).not_to_have_class(re.compile("tf-stale"))
    expect(page.locator("#tf-workers tbody tr").first).to_have_attribute("data-worker", "mailer-2")
    _shot(page, "workers")

    # 7. Back on the overview, the operator's replay is in the recent actions.
    page.goto(f"{base}/admin/")
    expect(page.locator("#tf-recent-actions")).to_contain_text("Replayed")
