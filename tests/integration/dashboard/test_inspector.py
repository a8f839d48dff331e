"""The task inspector: filters, exact search, the detail page, and its lifecycle actions."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from queues import lifecycle
from queues.models import Status, Task, TaskEvent
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db

URL = "/admin/queues/task/"


def _listed(response) -> set:  # type: ignore[no-untyped-def]
    return {task.id for task in response.context["cl"].result_list}


def _post_action(client, action: str, ids, follow_query: str = "", **extra):  # type: ignore[no-untyped-def]
    data = {"action": action, "_selected_action": [str(i) for i in ids], "index": "0", **extra}
    return client.post(URL + follow_query, data)


def _confirm(client, action: str, ids):  # type: ignore[no-untyped-def]
    return client.post(URL, {"action": action, "_selected_action": [str(i) for i in ids], "confirm": "yes"})


def test_filters_by_queue_status_worker_and_time_range(staff_client):
    mail, other = QueueFactory(name="mail"), QueueFactory(name="other")
    now = timezone.now()
    old = TaskFactory(queue=mail, created_at=now - timedelta(days=2))
    pending = TaskFactory(queue=mail)
    held = TaskFactory(queue=mail, claimed=True, claimed_by="worker-7")
    elsewhere = TaskFactory(queue=other, claimed=True, claimed_by="worker-7")

    assert _listed(staff_client.get(URL, {"queue__id__exact": mail.id})) == {old.id, pending.id, held.id}
    assert _listed(staff_client.get(URL, {"status__exact": "claimed"})) == {held.id, elsewhere.id}
    by_worker = staff_client.get(URL, {"claimed_by__exact": "worker-7", "queue__id__exact": mail.id})
    assert _listed(by_worker) == {held.id}
    assert _listed(staff_client.get(URL, {"claimed_by__exact": "worker"})) == set()  # exact, not a substring
    since = (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    assert _listed(staff_client.get(URL, {"created_at__gte": since, "queue__id__exact": mail.id})) == {
        pending.id,
        held.id,
    }
    assert _listed(staff_client.get(URL, {"created_at__lt": since})) == {old.id}
    future = (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert _listed(staff_client.get(URL, {"scheduled_at__gte": future})) == set()
    # An emptied form input is no condition at all.
    assert len(_listed(staff_client.get(URL, {"claimed_by__exact": "", "created_at__gte": ""}))) == 4


def test_the_time_filter_form_keeps_the_other_filters(staff_client):
    mail = QueueFactory(name="mail")
    page = staff_client.get(URL, {"queue__id__exact": mail.id, "status__exact": "pending"}).content.decode()
    assert f'<input type="hidden" name="queue__id__exact" value="{mail.id}">' in page
    assert '<input type="hidden" name="status__exact" value="pending">' in page
    assert 'name="created_at__gte"' in page and 'name="claimed_by__exact"' in page


def test_search_matches_a_task_id_or_an_idempotency_key_exactly(staff_client):
    mail, other = QueueFactory(name="mail"), QueueFactory(name="other")
    keyed = TaskFactory(queue=other, idempotency_key="order-42")
    plain = TaskFactory(queue=mail)

    assert _listed(staff_client.get(URL, {"q": str(plain.id)})) == {plain.id}
    assert _listed(staff_client.get(URL, {"q": "order-42"})) == {keyed.id}
    assert _listed(staff_client.get(URL, {"q": "order-4"})) == set()
    assert _listed(staff_client.get(URL, {"q": str(plain.id)[:8]})) == set()


def test_search_never_scans_with_like(staff_client):
    TaskFactory(idempotency_key="k-1")
    with CaptureQueriesContext(connection) as queries:
        staff_client.get(URL, {"q": "k-1"})
    assert not [q["sql"] for q in queries if "LIKE" in q["sql"].upper()]


def test_the_changelist_costs_the_same_queries_for_5_or_50_rows(staff_client):
    mail = QueueFactory(name="mail")
    TaskFactory.create_batch(5, queue=mail)
    with CaptureQueriesContext(connection) as few:
        staff_client.get(URL)
    TaskFactory.create_batch(45, queue=mail)
    with CaptureQueriesContext(connection) as many:
        staff_client.get(URL)
    assert len(many) == len(few)


def test_the_detail_page_shows_payload_result_history_heartbeats_error_and_lease(staff_client, queue):
    ((row, _),) = lifecycle.enqueue(queue, [lifecycle.NewTask(payload={"user": "abc", "items": [1, 2]})])
    (claimed,) = lifecycle.claim("w-1", [queue.id], 1)
    for _ in range(25):
        lifecycle.heartbeat(row["id"], worker_id="w-1", lease_token=claimed["lease_token"])
    lifecycle.nack(row["id"], worker_id="w-1", error="Traceback: <boom>", lease_token=claimed["lease_token"])

    response = staff_client.get(f"{URL}{row['id']}/change/")

    page = response.content.decode()
    assert response.status_code == 200
    assert json.dumps({"items": [1, 2], "user": "abc"}, indent=2).replace('"', "&quot;") in page
    assert "Traceback: &lt;boom&gt;" in page  # escaped, never raw HTML
    history = page.split('class="tf-history"')[1].split("</table>")[0]
    assert history.count("<tr>") == 1 + 4  # header + enqueue, claim, first heartbeat, nack
    for status in ("pending", "claimed", "executing", "retry"):
        assert f"<td>{status}</td>" in history
    beats = page.split('class="tf-heartbeats"')[1].split("</table>")[0]
    assert "last 20 heartbeat(s)" in beats
    assert beats.count("<td>w-1</td>") == 20
    assert TaskEvent.objects.filter(task_id=row["id"], kind="heartbeat").count() == 24  # the first one is a transition
    assert "Retry now" in page and "Cancel task" in page  # a retry task offers both
    assert 'name="_save"' not in page  # read-only: no save button


def test_the_detail_page_shows_the_live_lease(staff_client, queue):
    ((row, _),) = lifecycle.enqueue(queue, [lifecycle.NewTask(payload={})])
    lifecycle.claim("w-9", [queue.id], 1)
    page = staff_client.get(f"{URL}{row['id']}/change/").content.decode()
    assert "expires at" in page and "w-9" in page
    assert "Retry now" not in page and "Cancel task" in page  # a running task can be asked to stop


def test_task_fields_cannot_be_changed_through_the_form(staff_client, queue):
    task = TaskFactory(queue=queue)
    response = staff_client.post(f"{URL}{task.id}/change/", {"status": "done", "priority": 1, "_save": "1"})
    assert response.status_code == 403
    task.refresh_from_db()
    assert (task.status, task.priority) == (Status.PENDING, 5)
    assert staff_client.get(f"{URL}add/").status_code == 403


def test_cancel_action_asks_then_cancels_through_the_lifecycle_and_logs(staff_client, staff, queue):
    pending = TaskFactory(queue=queue)
    running = TaskFactory(queue=queue, claimed=True)

    asked = _post_action(staff_client, "cancel_tasks", [pending.id, running.id])

    assert asked.status_code == 200
    assert "Cancel 2 task(s)?" in asked.content.decode()
    assert Task.objects.get(pk=pending.id).status == Status.PENDING  # nothing happens before confirming

    done = _confirm(staff_client, "cancel_tasks", [pending.id, running.id])

    assert done.status_code == 302
    assert Task.objects.get(pk=pending.id).status == Status.CANCELLED
    running_now = Task.objects.get(pk=running.id)
    assert (running_now.status, running_now.cancel_requested) == (Status.CLAIMED, True)  # asked to stop
    event = TaskEvent.objects.get(task_id=pending.id)
    assert (event.from_status, event.to_status) == ("pending", "cancelled")
    log = LogEntry.objects.get(object_id=str(pending.id))
    assert (log.user_id, log.action_flag, log.change_message) == (staff.id, CHANGE, "Cancelled")
    log = LogEntry.objects.get(object_id=str(running.id))
    assert (log.user_id, log.action_flag, log.change_message) == (staff.id, CHANGE, "Cancel requested")


def test_retry_now_action_moves_only_retry_tasks(staff_client, staff, queue):
    waiting = TaskFactory(
        queue=queue, status=Status.RETRY, attempts=1, scheduled_at=timezone.now() + timedelta(hours=1)
    )
    pending = TaskFactory(queue=queue)

    response = _post_action(staff_client, "retry_tasks_now", [waiting.id, pending.id])

    assert response.status_code == 302
    waiting.refresh_from_db()
    assert waiting.status == Status.PENDING and waiting.scheduled_at <= timezone.now()
    assert TaskEvent.objects.get(task_id=waiting.id).detail == "retried now by admin:oncall"
    assert LogEntry.objects.filter(object_id=str(waiting.id), user=staff).count() == 1
    assert not LogEntry.objects.filter(object_id=str(pending.id)).exists()


def test_detail_page_buttons_cancel_and_retry(staff_client, queue):
    waiting = TaskFactory(
        queue=queue, status=Status.RETRY, attempts=1, scheduled_at=timezone.now() + timedelta(hours=1)
    )
    other = TaskFactory(queue=queue)

    assert staff_client.get(f"{URL}{waiting.id}/retry-now/").status_code == 405
    assert staff_client.post(f"{URL}{waiting.id}/retry-now/").status_code == 302
    assert Task.objects.get(pk=waiting.id).status == Status.PENDING

    assert "Cancel task" in staff_client.get(f"{URL}{other.id}/cancel/").content.decode()
    assert Task.objects.get(pk=other.id).status == Status.PENDING
    assert staff_client.post(f"{URL}{other.id}/cancel/", {"confirm": "yes"}).status_code == 302
    assert Task.objects.get(pk=other.id).status == Status.CANCELLED


def test_a_viewer_sees_tasks_but_cannot_act(viewer_client, queue):
    task = TaskFactory(queue=queue)
    page = viewer_client.get(f"{URL}{task.id}/change/").content.decode()
    assert "Cancel task" not in page
    assert viewer_client.post(f"{URL}{task.id}/cancel/", {"confirm": "yes"}).status_code == 302
    assert _confirm(viewer_client, "cancel_tasks", [task.id]).status_code in (200, 302)
    assert Task.objects.get(pk=task.id).status == Status.PENDING
