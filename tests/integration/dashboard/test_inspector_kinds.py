"""The task inspector and the v2 task fields: kind (filter, search, column), time limit."""

from __future__ import annotations

import pytest

from queues import lifecycle
from queues.models import Queue, Task
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db

URL = "/admin/queues/task/"


def _listed(response) -> set:  # type: ignore[no-untyped-def]
    return {task.id for task in response.context["cl"].result_list}


def test_filters_on_kind_exactly(staff_client):
    mail, other = QueueFactory(name="mail"), QueueFactory(name="other")
    sends = {TaskFactory(queue=mail, kind="emails.send").id, TaskFactory(queue=other, kind="emails.send").id}
    TaskFactory(queue=mail, kind="emails.send.v2")
    TaskFactory(queue=mail)
    assert _listed(staff_client.get(URL, {"kind__exact": "emails.send"})) == sends
    assert _listed(staff_client.get(URL, {"kind__exact": "emails"})) == set()  # exact, not a prefix
    page = staff_client.get(URL).content.decode()
    assert 'name="kind__exact"' in page


def test_search_matches_a_kind_exactly_besides_ids_and_keys(staff_client):
    mail = QueueFactory(name="mail")
    typed = TaskFactory(queue=mail, kind="reports.nightly")
    keyed = TaskFactory(queue=mail, idempotency_key="reports.nightly")
    TaskFactory(queue=mail, kind="reports.nightly.extra")
    assert _listed(staff_client.get(URL, {"q": "reports.nightly"})) == {typed.id, keyed.id}
    assert _listed(staff_client.get(URL, {"q": "reports"})) == set()


def test_the_list_and_the_detail_page_show_kind_and_time_limit(staff_client, queue):
    ((row, _),) = lifecycle.enqueue(queue, [lifecycle.NewTask({}, kind="emails.send", timeout_seconds=90)])
    assert "emails.send" in staff_client.get(URL).content.decode()
    page = staff_client.get(f"{URL}{row['id']}/change/").content.decode()
    assert "emails.send" in page
    assert "90 s per attempt" in page
    ((plain, _),) = lifecycle.enqueue(queue, [lifecycle.NewTask({})])
    page = staff_client.get(f"{URL}{plain['id']}/change/").content.decode()
    assert "Time limit" in page and "none" in page


QUEUE_FORM = {"name": "mail", "max_retries": 5, "rate_limit": "", "rate_burst": "", "retry_base_ms": 1000,
              "retry_max_delay_ms": 60000}  # fmt: skip


@pytest.mark.parametrize(("value", "stored"), [("60", 60), ("", None)])
def test_the_queue_form_sets_the_time_limit(staff_client, value, stored):
    response = staff_client.post("/admin/queues/queue/add/", {**QUEUE_FORM, "timeout_seconds": value})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Queue.objects.get(name="mail").timeout_seconds == stored


@pytest.mark.parametrize("value", ["0", "86401", "1.5"])
def test_the_queue_form_refuses_a_bad_time_limit(staff_client, value):
    response = staff_client.post("/admin/queues/queue/add/", {**QUEUE_FORM, "timeout_seconds": value})
    assert response.status_code == 200
    assert "timeout_seconds" in response.context["adminform"].form.errors
    assert not Queue.objects.exists()


def test_the_detail_page_shows_progress_and_a_cancel_request(staff_client, queue):
    ((row, _),) = lifecycle.enqueue(queue, [lifecycle.NewTask({})])
    (claimed,) = lifecycle.claim("w-1", [queue.id], 1)
    lifecycle.heartbeat(row["id"], worker_id="w-1", lease_token=claimed["lease_token"], progress={"rows": 4242})
    page = staff_client.get(f"{URL}{row['id']}/change/").content.decode()
    assert "4242" in page and "cancel requested" not in page
    lifecycle.request_cancel(queue, row["id"])
    page = staff_client.get(f"{URL}{row['id']}/change/").content.decode()
    assert "cancel requested" in page and "Cancel task" in page


def test_the_cancel_button_asks_a_running_task_to_stop(staff_client, staff, queue):
    ((row, _),) = lifecycle.enqueue(queue, [lifecycle.NewTask({})])
    lifecycle.claim("w-1", [queue.id], 1)
    response = staff_client.post(f"{URL}{row['id']}/cancel/", {"confirm": "yes"})
    assert response.status_code == 302
    task = Task.objects.get(pk=row["id"])
    assert (task.status, task.cancel_requested) == ("claimed", True)
    messages = [str(m) for m in staff_client.get(f"{URL}{row['id']}/change/").context["messages"]]
    assert any("asked to stop" in m for m in messages), messages
