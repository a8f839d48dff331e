"""The workers page's controls: quiet, stop and resume buttons for staff who may change workers."""

from __future__ import annotations

import pytest
from django.urls import reverse

from workers import registry
from workers.models import Worker

pytestmark = pytest.mark.django_db

PAGE = "/admin/workers/"


@pytest.fixture(autouse=True)
def _seen():  # type: ignore[no-untyped-def]
    registry.forget_writes()
    registry.seen("web-1", claim=True)


def url(worker_id: str, action: str) -> str:
    return reverse("admin:worker-control", args=[worker_id, action])


def test_quiet_then_resume_from_the_page(staff_client):
    page = staff_client.get(PAGE).content.decode()
    assert f'action="{url("web-1", "quiet")}"' in page and f'action="{url("web-1", "stop")}"' in page
    assert 'value="resume"' not in page

    done = staff_client.post(url("web-1", "quiet"), follow=True)
    assert done.redirect_chain[-1][0] == PAGE
    assert "Worker web-1 is quiet" in done.content.decode()
    assert Worker.objects.get(pk="web-1").control == "quiet"
    page = staff_client.get(PAGE).content.decode()
    assert "tf-control-badge" in page and 'value="resume"' in page and 'value="quiet"' not in page

    staff_client.post(url("web-1", "resume"))
    assert Worker.objects.get(pk="web-1").control is None


def test_stop_and_the_refusals(staff_client, viewer_client):
    staff_client.post(url("web-1", "stop"))
    assert Worker.objects.get(pk="web-1").control == "stop"
    assert staff_client.get(url("web-1", "quiet")).status_code == 405
    assert staff_client.post(url("web-1", "pause")).status_code == 404
    unknown = staff_client.post(url("never-seen", "quiet"), follow=True)
    assert "has not been seen" in unknown.content.decode()
    # Staff without the change permission see no buttons and cannot post.
    assert 'value="quiet"' not in viewer_client.get(PAGE).content.decode()
    assert viewer_client.post(url("web-1", "resume")).status_code == 403
    assert Worker.objects.get(pk="web-1").control == "stop"


def test_the_page_shows_where_a_worker_runs_and_what_it_is(staff_client):
    Worker.objects.filter(pk="web-1").update(address="10.0.0.7", agent="taskforge-worker/0.3.0 python/3.12.1")
    page = staff_client.get(PAGE).content.decode()
    assert "<td>10.0.0.7</td><td>taskforge-worker/0.3.0 python/3.12.1</td>" in page


def test_a_busy_worker_without_a_heartbeat_says_since_when_it_holds_tasks(staff_client, queue):
    from queues import lifecycle

    lifecycle.enqueue(queue, [lifecycle.NewTask(payload={})])
    lifecycle.claim("web-1", [queue.id], 1)
    page = staff_client.get(PAGE).content.decode()
    assert "none yet (claimed " in page and "never" not in page
