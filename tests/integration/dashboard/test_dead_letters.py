"""The dead-letter browser: filters, per-row and bulk replay/discard, and the audit trail."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.utils import timezone

from queues import lifecycle
from queues.models import DeadLetterTask, Status, Task, TaskEvent
from tests.factories import QueueFactory

pytestmark = pytest.mark.django_db

URL = "/admin/queues/deadlettertask/"


def _kill(queue, n: int = 1, error: str = "boom") -> list:  # type: ignore[no-untyped-def]
    """n tasks that really died: enqueued, claimed, nacked without retry (all through the lifecycle)."""
    lifecycle.enqueue(queue, [lifecycle.NewTask(payload={"i": i}) for i in range(n)])
    ids = []
    for row in lifecycle.claim("w", [queue.id], n):
        lifecycle.nack(row["id"], worker_id="w", error=error, lease_token=row["lease_token"], retry=False)
        ids.append(row["id"])
    return ids


def _listed(response) -> set:  # type: ignore[no-untyped-def]
    return {entry.task_id for entry in response.context["cl"].result_list}


def _status(task_id) -> str:  # type: ignore[no-untyped-def]
    return Task.objects.get(pk=task_id).status


def test_lists_dead_tasks_filtered_by_queue_and_death_time(staff_client):
    mail, other = QueueFactory(name="mail"), QueueFactory(name="other")
    mail_dead = _kill(mail, 2)
    other_dead = _kill(other, 1)
    DeadLetterTask.objects.filter(pk=mail_dead[0]).update(died_at=timezone.now() - timedelta(days=3))

    assert _listed(staff_client.get(URL)) == {*mail_dead, *other_dead}
    assert _listed(staff_client.get(URL, {"queue__id__exact": mail.id})) == set(mail_dead)
    cutoff = (timezone.now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    assert _listed(staff_client.get(URL, {"died_at__lt": cutoff})) == {mail_dead[0]}
    assert _listed(staff_client.get(URL, {"died_at__gte": cutoff, "queue__id__exact": mail.id})) == {mail_dead[1]}
    page = staff_client.get(URL).content.decode()
    assert "replay_count" in page or "replay count" in page.lower()
    assert "Replay all matching the filter" in page


def test_per_row_replay_asks_then_replays_and_logs(staff_client, staff, queue):
    (task_id,) = _kill(queue)

    page = staff_client.get(f"{URL}{task_id}/replay/")
    assert page.status_code == 200 and "Replay these dead tasks (1)?" in page.content.decode()
    assert _status(task_id) == Status.DEAD

    response = staff_client.post(f"{URL}{task_id}/replay/", {"confirm": "yes"})

    assert response.status_code == 302
    assert _status(task_id) == Status.PENDING
    entry = DeadLetterTask.objects.get(pk=task_id)
    assert entry.replay_count == 1 and entry.replayed_at is not None
    assert TaskEvent.objects.filter(task_id=task_id, to_status="pending").last().detail == "replayed by admin:oncall"
    log = LogEntry.objects.get(object_id=str(task_id))
    assert (log.user_id, log.action_flag) == (staff.id, CHANGE)
    # A replayed entry leaves the default (dead now) list and shows under "replayed", with its count.
    assert _listed(staff_client.get(URL)) == set()
    replayed = staff_client.get(URL, {"state": "replayed"})
    assert _listed(replayed) == {task_id}
    assert "replayed (now pending)" in replayed.content.decode()


def test_per_row_discard_deletes_the_task_and_logs_a_deletion(staff_client, staff, queue):
    (task_id,) = _kill(queue)

    assert "Discard these dead tasks (1)?" in staff_client.get(f"{URL}{task_id}/discard/").content.decode()
    response = staff_client.post(f"{URL}{task_id}/discard/", {"confirm": "yes"})

    assert response.status_code == 302
    assert not Task.objects.filter(pk=task_id).exists()
    assert not DeadLetterTask.objects.filter(pk=task_id).exists()
    log = LogEntry.objects.get(object_id=str(task_id))
    assert (log.user_id, log.action_flag, log.change_message) == (staff.id, DELETION, "Discarded for good")


def test_bulk_replay_selected_asks_first_and_replays_only_those(staff_client, staff, queue):
    first, second, third = _kill(queue, 3)
    selection = {"action": "replay_selected", "_selected_action": [str(first), str(second)], "index": "0"}

    asked = staff_client.post(URL, selection)

    assert asked.status_code == 200
    assert "Replay these dead tasks (2)?" in asked.content.decode()
    assert {_status(t) for t in (first, second, third)} == {Status.DEAD}

    done = staff_client.post(URL, {**selection, "confirm": "yes"})

    assert done.status_code == 302
    assert (_status(first), _status(second), _status(third)) == (Status.PENDING, Status.PENDING, Status.DEAD)
    assert set(LogEntry.objects.filter(user=staff).values_list("object_id", flat=True)) == {str(first), str(second)}


def test_bulk_discard_selected(staff_client, staff, queue):
    first, second = _kill(queue, 2)
    selection = {"action": "discard_selected", "_selected_action": [str(first)], "index": "0"}

    assert "Discard these dead tasks (1)?" in staff_client.post(URL, selection).content.decode()
    staff_client.post(URL, {**selection, "confirm": "yes"})

    assert not Task.objects.filter(pk=first).exists()
    assert _status(second) == Status.DEAD
    assert LogEntry.objects.get(user=staff).action_flag == DELETION


def test_replay_all_matching_the_filter_replays_every_page_of_that_queue_only(staff_client, staff):
    mail, other = QueueFactory(name="mail"), QueueFactory(name="other")
    mail_dead = _kill(mail, 60)  # more than one changelist page (50)
    other_dead = _kill(other, 2)
    query = f"?queue__id__exact={mail.id}"

    asked = staff_client.get(f"{URL}replay-matching/{query}")
    assert "Replay every dead task matching the filter (60)?" in asked.content.decode()
    assert Task.objects.filter(status=Status.DEAD).count() == 62

    done = staff_client.post(f"{URL}replay-matching/{query}", {"confirm": "yes"})

    assert done.status_code == 302 and done["Location"].endswith(query)
    assert set(Task.objects.filter(pk__in=mail_dead).values_list("status", flat=True)) == {Status.PENDING}
    assert set(Task.objects.filter(pk__in=other_dead).values_list("status", flat=True)) == {Status.DEAD}
    assert LogEntry.objects.filter(user=staff, action_flag=CHANGE).count() == 60


def test_replay_skips_an_entry_that_is_no_longer_dead(staff_client, queue):
    (task_id,) = _kill(queue)
    lifecycle.replay(queue, task_id)  # someone else replayed it first (API)

    staff_client.post(f"{URL}{task_id}/replay/", {"confirm": "yes"})

    assert DeadLetterTask.objects.get(pk=task_id).replay_count == 1
    assert not LogEntry.objects.exists()


def test_a_viewer_cannot_replay_or_discard(viewer_client, queue):
    (task_id,) = _kill(queue)
    assert viewer_client.get(URL).status_code == 200
    viewer_client.post(f"{URL}{task_id}/replay/", {"confirm": "yes"})
    viewer_client.post(f"{URL}{task_id}/discard/", {"confirm": "yes"})
    viewer_client.post(f"{URL}replay-matching/", {"confirm": "yes"})
    assert _status(task_id) == Status.DEAD
    assert "Replay all matching" not in viewer_client.get(URL).content.decode()


def test_a_replayed_task_that_dies_again_is_listed_as_dead_again(staff_client, queue):
    (task_id,) = _kill(queue)
    lifecycle.replay(queue, task_id)
    (row,) = lifecycle.claim("w", [queue.id], 1)
    lifecycle.nack(task_id, worker_id="w", error="again", lease_token=row["lease_token"], retry=False)

    assert _listed(staff_client.get(URL)) == {task_id}
    assert _listed(staff_client.get(URL, {"state": "replayed"})) == set()
    assert _listed(staff_client.get(URL, {"state": "all"})) == {task_id}
