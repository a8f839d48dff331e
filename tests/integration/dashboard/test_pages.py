"""Who may see the dashboard, and what the overview and worker pages show."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from queues import lifecycle
from tests.factories import QueueFactory, TaskFactory
from workers import registry

pytestmark = pytest.mark.django_db

PAGES = [
    "/admin/",
    "/admin/workers/",
    "/admin/queues/queue/",
    "/admin/queues/task/",
    "/admin/queues/deadlettertask/",
    "/admin/queues/apikey/",
]


@pytest.mark.parametrize("url", PAGES)
def test_anonymous_is_sent_to_the_login_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@pytest.mark.parametrize("url", PAGES)
def test_a_logged_in_user_who_is_not_staff_is_refused(user_client, url):
    response = user_client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@pytest.mark.parametrize("url", PAGES)
def test_staff_sees_every_page(staff_client, url):
    QueueFactory(name="mail")
    response = staff_client.get(url)
    assert response.status_code == 200, response.content[:500]


def test_staff_without_model_permissions_cannot_open_the_task_inspector(db, client):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("bare", is_staff=True)
    client.force_login(user)
    assert client.get("/admin/queues/task/").status_code == 403


def test_api_keys_do_not_open_the_admin(client, admin_api):
    response = admin_api.get("/admin/")
    assert response.status_code == 302


def test_the_overview_shows_every_queue_with_its_numbers_and_the_stream(staff_client):
    mail = QueueFactory(name="mail", rate_limit=20, rate_burst=40, paused=True)
    QueueFactory(name="reports")
    for _ in range(3):
        TaskFactory(queue=mail)
    TaskFactory(queue=mail, dead=True)
    TaskFactory(queue=mail, status="retry", attempts=1)

    response = staff_client.get("/admin/")

    page = response.content.decode()
    (mail_row,) = [q for q in response.context["overview"]["queues"] if q["queue"] == "mail"]
    assert mail_row["depth"]["pending"] == 3
    assert mail_row["depth"]["retry"] == 1
    assert mail_row["dlq_depth"] == 1
    assert (mail_row["paused"], mail_row["rate_limit"], mail_row["rate_burst"]) == (True, 20, 40)
    assert 'data-queue="mail"' in page and 'data-queue="reports"' in page
    assert 'data-field="depth.pending">3<' in page
    assert "20/s (burst 40)" in page
    assert 'data-stream-url="/dashboard/stream"' in page
    assert "dashboard/overview.js" in page
    assert 'class="tf-paused"' in page


def test_the_overview_script_and_styles_are_served_as_static_files(client):
    from django.contrib.staticfiles import finders

    assert finders.find("dashboard/overview.js")
    assert finders.find("dashboard/dashboard.css")


def test_the_workers_page_lists_current_tasks_and_highlights_stale_workers(staff_client, settings, queue):
    settings.TASKFORGE_HEARTBEAT_TIMEOUT = 30
    lifecycle.enqueue(queue, [lifecycle.NewTask(payload={"n": n}) for n in range(2)])
    registry.seen("fresh-worker", claim=True)
    (fresh_task,) = lifecycle.claim("fresh-worker", [queue.id], 1)
    registry.seen("old-worker", claim=True)
    (old_task,) = lifecycle.claim("old-worker", [queue.id], 1)
    registry.seen("idle-worker", claim=True)
    # old-worker's last claim/heartbeat was two minutes ago (it is still listed: seen within 10 minutes).
    from workers.models import Worker

    Worker.objects.filter(worker_id="old-worker").update(last_claim_at=timezone.now() - timedelta(minutes=2))

    response = staff_client.get("/admin/workers/")

    page = response.content.decode()
    workers = {w["worker_id"]: w for w in response.context["workers"]}
    assert set(workers) == {"fresh-worker", "old-worker", "idle-worker"}
    assert workers["old-worker"]["stale"] and not workers["fresh-worker"]["stale"]
    assert response.context["workers"][0]["worker_id"] == "old-worker"  # stale first
    assert '<tr data-worker="old-worker" class="tf-stale">' in page
    assert '<tr data-worker="fresh-worker" class="">' in page
    assert str(old_task["id"]) in page and str(fresh_task["id"]) in page
    assert "1 stale worker." in page
