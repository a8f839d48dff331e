"""Queue admin (create, edit, pause/resume, purge) and API key admin."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from queues.apikeys import hash_key
from queues.models import ApiKey, Queue, Status, Task, TaskEvent
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db

URL = "/admin/queues/queue/"


def _form(**fields):  # type: ignore[no-untyped-def]
    return {
        "name": "mail",
        "max_retries": 5,
        "rate_limit": "",
        "rate_burst": "",
        "retry_base_ms": 1000,
        "retry_max_delay_ms": 60000,
        **fields,
    }


def test_create_a_queue_with_rate_limit_and_retry_settings(staff_client):
    response = staff_client.post(f"{URL}add/", _form(rate_limit=10, rate_burst=20, retry_base_ms=500))
    assert response.status_code == 302, response.content.decode()[:2000]
    queue = Queue.objects.get(name="mail")
    assert (queue.rate_limit, queue.rate_burst, queue.max_retries, queue.retry_base_ms) == (10, 20, 5, 500)


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "bad name!"},
        {"rate_limit": 0},
        {"max_retries": 26},
        {"retry_base_ms": 5000, "retry_max_delay_ms": 1000},
    ],
)
def test_invalid_settings_are_refused_with_the_form(staff_client, fields):
    response = staff_client.post(f"{URL}add/", _form(**fields))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors
    assert not Queue.objects.exists()


def test_edit_keeps_the_name(staff_client):
    queue = QueueFactory(name="mail")
    response = staff_client.post(f"{URL}{queue.pk}/change/", _form(name="renamed", rate_limit=7))
    assert response.status_code == 302
    queue.refresh_from_db()
    assert (queue.name, queue.rate_limit) == ("mail", 7)


def test_queues_cannot_be_deleted_from_the_admin(staff_client):
    queue = QueueFactory(name="mail")
    assert staff_client.post(f"{URL}{queue.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Queue.objects.filter(pk=queue.pk).exists()


@pytest.mark.parametrize(("action", "start", "end"), [("pause_queues", False, True), ("resume_queues", True, False)])
def test_pause_and_resume_ask_first(staff_client, staff, action, start, end):
    queue = QueueFactory(name="mail", paused=start)
    selection = {"action": action, "_selected_action": [str(queue.pk)], "index": "0"}

    assert "mail" in staff_client.post(URL, selection).content.decode()
    assert Queue.objects.get(pk=queue.pk).paused is start

    staff_client.post(URL, {**selection, "confirm": "yes"})

    assert Queue.objects.get(pk=queue.pk).paused is end
    assert LogEntry.objects.get(user=staff).change_message == ("Paused" if end else "Resumed")


def test_purge_cancels_pending_and_retry_tasks_through_the_lifecycle(staff_client, staff):
    queue = QueueFactory(name="mail")
    pending = TaskFactory(queue=queue)
    waiting = TaskFactory(queue=queue, status=Status.RETRY, attempts=1)
    running = TaskFactory(queue=queue, claimed=True)
    selection = {"action": "purge_queues", "_selected_action": [str(queue.pk)], "index": "0"}

    asked = staff_client.post(URL, selection)
    assert "Cancel every pending and retry task of these queues?" in asked.content.decode()
    assert Task.objects.get(pk=pending.pk).status == Status.PENDING

    staff_client.post(URL, {**selection, "confirm": "yes"})

    statuses = dict(Task.objects.values_list("id", "status"))
    assert statuses == {pending.id: Status.CANCELLED, waiting.id: Status.CANCELLED, running.id: Status.CLAIMED}
    assert set(TaskEvent.objects.values_list("detail", flat=True)) == {"purged"}
    assert "2 pending/retry task(s) cancelled" in LogEntry.objects.get(user=staff).change_message


def test_api_key_created_in_the_admin_is_shown_once_and_stored_hashed(staff_client):
    response = staff_client.post("/admin/queues/apikey/add/", {"name": "billing", "role": "producer"}, follow=True)
    (message,) = [str(m) for m in response.context["messages"] if "Copy it now" in str(m)]
    raw = message.rsplit(": ", 1)[1]
    key = ApiKey.objects.get(name="billing")
    assert key.key_hash == hash_key(raw) and key.role == "producer"
    assert raw not in staff_client.get(f"/admin/queues/apikey/{key.pk}/change/").content.decode()


def test_api_keys_are_revoked_by_an_action(staff_client, staff, make_key):
    make_key("worker")
    key = ApiKey.objects.get()
    staff_client.post("/admin/queues/apikey/", {"action": "revoke_keys", "_selected_action": [key.pk], "index": "0"})
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert LogEntry.objects.get(user=staff).change_message == "Revoked"
