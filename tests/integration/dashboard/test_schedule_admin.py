"""Schedule admin: the list with next five fire times; create and edit; pause, resume, trigger."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry

from queues.models import Schedule, Task
from queues.schedules import planning
from tests.factories import QueueFactory

pytestmark = pytest.mark.django_db

URL = "/admin/queues/schedule/"


def _form(queue, **fields):  # type: ignore[no-untyped-def]
    return {
        "name": "nightly",
        "queue": queue.pk,
        "cron": "0 3 * * *",
        "every_seconds": "",
        "timezone": "Europe/Berlin",
        "payload": '{"report": "daily"}',
        "kind": "",
        "priority": 5,
        "catch_up": "latest",
        **fields,
    }


def _schedule(name="s", **fields):  # type: ignore[no-untyped-def]
    schedule = Schedule(name=name, queue=fields.pop("queue", None) or QueueFactory(name=f"q-{name}"), **fields)
    if schedule.cron is None and schedule.every_seconds is None:
        schedule.every_seconds = 3600
    schedule.next_run_at = planning.planned_next_run(schedule)
    schedule.save()
    return schedule


def _action(client, action, schedules, confirm=True):  # type: ignore[no-untyped-def]
    data = {"action": action, "_selected_action": [s.pk for s in schedules]}
    if confirm:
        data["confirm"] = "yes"
    return client.post(URL, data)


def test_the_list_shows_the_next_five_fire_times(staff_client):
    _schedule("hourly", every_seconds=3600)
    _schedule("berlin", cron="30 2 * * *", timezone="Europe/Berlin")
    page = staff_client.get(URL)
    assert page.status_code == 200
    html = page.content.decode()
    assert "next 5 fire times" in html.lower()
    assert html.count("<li><time") == 10
    assert "CET" in html or "CEST" in html
    assert 'href="/admin/queues/schedule/"' in html  # the top bar links the page


def test_create_in_the_admin_plans_the_next_run(staff_client):
    queue = QueueFactory(name="reports")
    response = staff_client.post(f"{URL}add/", _form(queue))
    assert response.status_code == 302, response.content.decode()[:3000]
    schedule = Schedule.objects.get(name="nightly")
    assert schedule.payload == {"report": "daily"}
    assert schedule.next_run_at is not None
    assert schedule.next_run_at.astimezone(planning.timing.check_timezone("Europe/Berlin")).hour == 3


@pytest.mark.parametrize(
    "fields",
    [
        {"cron": "61 * * * *"},
        {"cron": "", "every_seconds": ""},
        {"cron": "* * * * *", "every_seconds": 5},
        {"every_seconds": 0, "cron": ""},
        {"timezone": "Mars/Olympus"},
        {"payload": "[1, 2]"},
        {"name": "bad name"},
        {"priority": 11},
    ],
)
def test_invalid_schedules_are_refused_with_the_form(staff_client, fields):
    queue = QueueFactory(name="reports")
    response = staff_client.post(f"{URL}add/", _form(queue, **fields))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors or response.context["adminform"].form.non_field_errors()
    assert not Schedule.objects.exists()


def test_editing_the_timing_replans_and_keeps_the_name(staff_client):
    schedule = _schedule("s", cron="0 3 * * *")
    response = staff_client.post(
        f"{URL}{schedule.pk}/change/", _form(schedule.queue, name="renamed", cron="", every_seconds=60, timezone="UTC")
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    schedule.refresh_from_db()
    assert (schedule.name, schedule.cron, schedule.every_seconds) == ("s", None, 60)
    assert timedelta(seconds=59) < schedule.next_run_at - planning.database_now() <= timedelta(seconds=60)


def test_pause_and_resume_ask_first_then_act(staff_client):
    one, two = _schedule("one"), _schedule("two")
    page = _action(staff_client, "pause_schedules", [one, two], confirm=False)
    assert page.status_code == 200 and "Pause these schedules?" in page.content.decode()
    assert not Schedule.objects.filter(paused=True).exists()
    _action(staff_client, "pause_schedules", [one, two])
    assert list(Schedule.objects.values_list("paused", "next_run_at")) == [(True, None), (True, None)]
    assert LogEntry.objects.filter(change_message="Paused").count() == 2
    _action(staff_client, "resume_schedules", [one])
    one.refresh_from_db()
    assert one.paused is False and one.next_run_at is not None


def test_trigger_enqueues_one_task_each(staff_client):
    one, two = _schedule("one", payload={"n": 1}), _schedule("two", paused=True)
    _action(staff_client, "trigger_schedules", [one, two])
    assert sorted(Task.objects.values_list("queue__name", flat=True)) == ["q-one", "q-two"]
    one.refresh_from_db()
    assert one.last_task_id == Task.objects.get(queue__name="q-one").id
    page = staff_client.get(f"{URL}{one.pk}/change/")
    assert str(one.last_task_id) in page.content.decode()


def test_a_paused_schedule_still_shows_when_it_would_fire(staff_client):
    _schedule("p", every_seconds=60, paused=True)
    html = staff_client.get(URL).content.decode()
    assert "paused: times if resumed now" in html
    assert html.count("<li><time") == 5


def test_the_five_fire_times_of_an_interval_follow_its_next_run():
    schedule = _schedule("i", every_seconds=90)
    fires = planning.upcoming_fires(schedule, 5)
    assert fires == [schedule.next_run_at + timedelta(seconds=90 * i) for i in range(5)]


def test_an_edit_keeps_what_the_loop_wrote_since_the_form_was_loaded(staff_client):
    schedule = _schedule("s", every_seconds=60, payload={"v": 1})
    staff_client.get(f"{URL}{schedule.pk}/change/")
    advanced = schedule.next_run_at + timedelta(minutes=5)
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=advanced, last_task_id=schedule.pk)
    response = staff_client.post(
        f"{URL}{schedule.pk}/change/",
        _form(schedule.queue, name="s", cron="", every_seconds=60, timezone="UTC", payload='{"v": 2}'),
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    schedule.refresh_from_db()
    assert (schedule.payload, schedule.next_run_at, schedule.last_task_id) == ({"v": 2}, advanced, schedule.pk)
