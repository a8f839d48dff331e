"""Schedule endpoints against API.md (Additions v2, periodic schedules): every status and bad input."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from rest_framework.test import APIClient

from queues.models import Queue, Schedule, Task
from tests.contract import SCHEDULE_FIELDS, TASK_FIELDS
from tests.factories import QueueFactory
from tests.integration.api.support import assert_error, counts

pytestmark = pytest.mark.django_db


@pytest.fixture
def reports(db):  # type: ignore[no-untyped-def]
    return QueueFactory(name="reports")


def create(client, **body):
    return client.post("/schedules", body, format="json")


def patch(client, name, **body):
    return client.patch(f"/schedules/{name}", body, format="json")


def stored() -> dict[str, int]:
    return {**counts(), "schedules": Schedule.objects.count()}


def db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


# --- create ---------------------------------------------------------------------------------------


def test_create_cron_schedule_with_defaults(admin_api, reports):
    response = create(admin_api, name="nightly-report", queue="reports", cron="0 3 * * *")
    assert response.status_code == 201, response.content
    body = response.json()
    assert tuple(body) == SCHEDULE_FIELDS
    assert body["name"] == "nightly-report"
    assert body["queue"] == "reports"
    assert body["cron"] == "0 3 * * *"
    assert body["every_seconds"] is None
    assert body["timezone"] == "UTC"
    assert body["payload"] == {}
    assert body["kind"] is None
    assert body["priority"] == 5
    assert body["paused"] is False
    assert body["catch_up"] == "latest"
    assert body["last_run_at"] is None and body["last_task_id"] is None
    next_run = at(body["next_run_at"])
    assert (next_run.hour, next_run.minute, next_run.second) == (3, 0, 0)
    assert timedelta(0) < next_run - db_now() <= timedelta(days=1)
    datetime.fromisoformat(body["created_at"])
    datetime.fromisoformat(body["updated_at"])


def test_create_with_every_field(admin_api, reports):
    fields = {
        "name": "Every_5-min",
        "queue": "reports",
        "cron": None,
        "every_seconds": 300,
        "timezone": "America/New_York",
        "payload": {"report": "daily", "nested": {"a": [1, 2]}},
        "kind": "reports.nightly",
        "priority": 1,
        "paused": False,
        "catch_up": "all",
    }
    response = create(admin_api, **fields)
    assert response.status_code == 201, response.content
    body = response.json()
    assert {name: body[name] for name in fields} == fields
    # The first fire is one interval after the creation (whole seconds), then every interval.
    next_run = at(body["next_run_at"])
    assert next_run.microsecond == 0
    assert timedelta(seconds=299) < next_run - db_now() <= timedelta(seconds=300)


def test_cron_with_seconds_names_and_time_zone(admin_api, reports):
    response = create(
        admin_api, name="berlin", queue="reports", cron="30 0 9 * jan-dec mon-fri", timezone="Europe/Berlin"
    )
    assert response.status_code == 201, response.content
    next_run = at(response.json()["next_run_at"]).astimezone(ZoneInfo("Europe/Berlin"))
    assert (next_run.hour, next_run.minute, next_run.second) == (9, 0, 30)
    assert next_run.weekday() < 5


def test_created_paused_has_no_next_run(admin_api, reports):
    response = create(admin_api, name="later", queue="reports", every_seconds=60, paused=True)
    assert response.status_code == 201, response.content
    assert response.json()["paused"] is True
    assert response.json()["next_run_at"] is None


def test_name_taken_is_409(admin_api, reports):
    assert create(admin_api, name="dup", queue="reports", every_seconds=60).status_code == 201
    before = stored()
    assert_error(create(admin_api, name="dup", queue="reports", cron="* * * * *"), 409, "conflict")
    assert stored() == before


def test_unknown_queue_is_404(admin_api, reports):
    before = stored()
    assert_error(create(admin_api, name="s", queue="nope", every_seconds=60), 404, "not_found")
    assert_error(create(admin_api, name="s", queue="bad name", every_seconds=60), 404, "not_found")
    assert stored() == before


VALID = {"name": "s", "queue": "reports", "every_seconds": 60}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cron": "* * * * *"}, "cron"),  # both
        ({"every_seconds": None}, "cron"),  # neither
        ({"every_seconds": 0}, "every_seconds"),
        ({"every_seconds": 86_401}, "every_seconds"),
        ({"every_seconds": "60"}, "every_seconds"),
        ({"every_seconds": 1.5}, "every_seconds"),
        ({"every_seconds": True}, "every_seconds"),
        ({"name": ""}, "name"),
        ({"name": "a" * 65}, "name"),
        ({"name": "has space"}, "name"),
        ({"name": "dots.not.allowed"}, "name"),
        ({"name": 5}, "name"),
        ({"queue": 5}, "queue"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"timezone": "../../etc/passwd"}, "timezone"),
        ({"timezone": ""}, "timezone"),
        ({"timezone": None}, "timezone"),
        ({"catch_up": "some"}, "catch_up"),
        ({"catch_up": 1}, "catch_up"),
        ({"catch_up": None}, "catch_up"),
        ({"payload": []}, "payload"),
        ({"payload": "x"}, "payload"),
        ({"payload": None}, "payload"),
        ({"kind": "has space"}, "kind"),
        ({"kind": "k" * 129}, "kind"),
        ({"kind": 5}, "kind"),
        ({"priority": 0}, "priority"),
        ({"priority": 11}, "priority"),
        ({"priority": "5"}, "priority"),
        ({"priority": None}, "priority"),
        ({"paused": "yes"}, "paused"),
        ({"paused": None}, "paused"),
        ({"priorty": 3}, "priorty"),
        ({"next_run_at": "2030-01-01T00:00:00Z"}, "next_run_at"),
        ({"last_task_id": None}, "last_task_id"),
        ({"id": "x"}, "id"),
    ],
)
def test_bad_create_bodies_are_400_naming_the_field(admin_api, reports, changes, field):
    before = stored()
    body = {**VALID, **changes}
    if field == "cron" and changes.get("every_seconds", 1) is None:
        body.pop("every_seconds")
    error = assert_error(create(admin_api, **body), 400, "validation_error")
    assert field in error["fields"], error
    assert stored() == before


def test_missing_required_fields_are_400(admin_api, reports):
    for missing in ("name", "queue"):
        body = {key: value for key, value in VALID.items() if key != missing}
        error = assert_error(create(admin_api, **body), 400, "validation_error")
        assert missing in error["fields"]
    error = assert_error(create(admin_api, name="s", queue="reports"), 400, "validation_error")
    assert set(error["fields"]) == {"cron", "every_seconds"}


@pytest.mark.parametrize(
    "cron",
    [
        "* * * *",
        "* * * * * * *",
        "61 * * * *",
        "* 24 * * *",
        "* * 32 * *",
        "* * * 13 *",
        "* * * * 8",
        "*/0 * * * *",
        "5-1/x * * * *",
        "@daily",
        "0 0 L * *",
        "0 0 * * mon#2",
        "H * * * *",
        "0 0 30 2 *",  # never matches a date
        "* * * foo *",
        "",
        "   ",
        "60 * * * * *",
    ],
)
def test_bad_cron_is_400(admin_api, reports, cron):
    before = stored()
    error = assert_error(create(admin_api, name="s", queue="reports", cron=cron), 400, "validation_error")
    assert "cron" in error["fields"], error
    assert stored() == before


@pytest.mark.parametrize(
    "cron",
    ["*/15 * * * *", "0 9-17 * * 1-5", "0 0 1,15 * *", "0 0 * jan,jul sun", "0 12 * * 7", "*/10 * * * * *"],
)
def test_standard_cron_forms_are_accepted(admin_api, reports, cron):
    response = create(admin_api, name="s", queue="reports", cron=cron)
    assert response.status_code == 201, response.content


def test_non_object_body_and_wrong_content_type(admin_api, reports):
    assert_error(admin_api.post("/schedules", [VALID], format="json"), 400, "validation_error")
    response = admin_api.post("/schedules", "name=s", content_type="application/x-www-form-urlencoded")
    assert_error(response, 415, "unsupported_media_type")
    assert Schedule.objects.count() == 0


def test_a_payload_above_the_body_cap_is_413(admin_api, reports, settings):
    settings.TASKFORGE_MAX_PAYLOAD_BYTES = 1024
    response = create(admin_api, **VALID, payload={"blob": "x" * 2000})
    assert_error(response, 413, "payload_too_large")
    assert Schedule.objects.count() == 0


# --- read, list -----------------------------------------------------------------------------------


def test_list_and_read(admin_api, reports):
    for name in ("b-sched", "a-sched"):
        assert create(admin_api, name=name, queue="reports", every_seconds=60).status_code == 201
    listing = admin_api.get("/schedules")
    assert listing.status_code == 200
    body = listing.json()
    assert set(body) == {"results"}
    assert [s["name"] for s in body["results"]] == ["a-sched", "b-sched"]
    assert all(tuple(s) == SCHEDULE_FIELDS for s in body["results"])
    one = admin_api.get("/schedules/a-sched/")
    assert one.status_code == 200 and one.json() == body["results"][0]


def test_empty_list(admin_api):
    response = admin_api.get("/schedules")
    assert response.status_code == 200 and response.json() == {"results": []}


@pytest.mark.parametrize("name", ["nope", "bad%20name", "%00", "a" * 65])
def test_unknown_or_malformed_name_is_404(admin_api, name):
    for response in (
        admin_api.get(f"/schedules/{name}"),
        admin_api.patch(f"/schedules/{name}", {"priority": 1}, format="json"),
        admin_api.delete(f"/schedules/{name}"),
        admin_api.post(f"/schedules/{name}/trigger"),
    ):
        assert_error(response, 404, "not_found")


# --- update ---------------------------------------------------------------------------------------


def test_patch_changes_only_what_it_names(admin_api, reports):
    created = create(admin_api, name="s", queue="reports", cron="0 3 * * *", payload={"a": 1}).json()
    response = patch(admin_api, "s", priority=2, payload={"b": 2}, kind="x.y", catch_up="none")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["priority"], body["payload"], body["kind"], body["catch_up"]) == (2, {"b": 2}, "x.y", "none")
    assert body["cron"] == "0 3 * * *" and body["next_run_at"] == created["next_run_at"]


def test_setting_every_seconds_on_a_cron_schedule_switches_it(admin_api, reports):
    create(admin_api, name="s", queue="reports", cron="0 3 * * *")
    body = patch(admin_api, "s", every_seconds=10).json()
    assert body["cron"] is None and body["every_seconds"] == 10
    assert timedelta(seconds=9) < at(body["next_run_at"]) - db_now() <= timedelta(seconds=10)
    body = patch(admin_api, "s", cron="*/5 * * * * *", every_seconds=None).json()
    assert body["cron"] == "*/5 * * * * *" and body["every_seconds"] is None
    assert at(body["next_run_at"]).second % 5 == 0


def test_patch_leaving_no_timing_or_both_is_400(admin_api, reports):
    create(admin_api, name="s", queue="reports", cron="0 3 * * *")
    before = Schedule.objects.get(name="s").__dict__.copy()
    assert set(assert_error(patch(admin_api, "s", cron=None), 400)["fields"]) == {"cron", "every_seconds"}
    assert set(assert_error(patch(admin_api, "s", cron="* * * * *", every_seconds=5), 400)["fields"]) == {
        "cron",
        "every_seconds",
    }
    after = Schedule.objects.get(name="s").__dict__
    assert {k: after[k] for k in ("cron", "every_seconds", "next_run_at", "updated_at")} == {
        k: before[k] for k in ("cron", "every_seconds", "next_run_at", "updated_at")
    }


def test_timezone_change_recomputes_next_run(admin_api, reports):
    create(admin_api, name="s", queue="reports", cron="0 3 * * *")
    body = patch(admin_api, "s", timezone="America/New_York").json()
    local = at(body["next_run_at"]).astimezone(ZoneInfo("America/New_York"))
    assert (local.hour, local.minute) == (3, 0)


def test_pause_clears_next_run_and_resume_plans_from_now(admin_api, reports):
    create(admin_api, name="s", queue="reports", every_seconds=3600)
    paused = patch(admin_api, "s", paused=True).json()
    assert paused["paused"] is True and paused["next_run_at"] is None
    resumed = patch(admin_api, "s", paused=False).json()
    assert resumed["paused"] is False
    assert timedelta(seconds=3599) < at(resumed["next_run_at"]) - db_now() <= timedelta(hours=1)


def test_patch_can_move_a_schedule_to_another_queue(admin_api, reports):
    QueueFactory(name="other")
    create(admin_api, name="s", queue="reports", every_seconds=60)
    assert patch(admin_api, "s", queue="other").json()["queue"] == "other"
    assert_error(patch(admin_api, "s", queue="missing"), 404, "not_found")
    assert Schedule.objects.get(name="s").queue.name == "other"


@pytest.mark.parametrize(
    "body",
    [
        {"name": "renamed"},
        {"priorty": 1},
        {"every_seconds": "10"},
        {"cron": "bad"},
        {"timezone": "Nowhere/City"},
        {"catch_up": "sometimes"},
        {"payload": [1]},
        {"next_run_at": None},
        {"created_at": "2026-01-01T00:00:00Z"},
    ],
)
def test_bad_patch_bodies_are_400_and_change_nothing(admin_api, reports, body):
    create(admin_api, name="s", queue="reports", every_seconds=60)
    before = admin_api.get("/schedules/s").json()
    error = assert_error(admin_api.patch("/schedules/s", body, format="json"), 400, "validation_error")
    assert set(body) <= set(error["fields"]) | {"cron"}
    assert admin_api.get("/schedules/s").json() == before


def test_empty_patch_is_200_and_changes_nothing(admin_api, reports):
    created = create(admin_api, name="s", queue="reports", every_seconds=60).json()
    response = admin_api.patch("/schedules/s", {}, format="json")
    assert response.status_code == 200
    assert response.json()["next_run_at"] == created["next_run_at"]


# --- delete, trigger ------------------------------------------------------------------------------


def test_delete_is_204_then_404_and_keeps_the_tasks(admin_api, reports):
    create(admin_api, name="s", queue="reports", every_seconds=60)
    task = admin_api.post("/schedules/s/trigger").json()
    response = admin_api.delete("/schedules/s")
    assert response.status_code == 204 and response.content == b""
    assert_error(admin_api.get("/schedules/s"), 404, "not_found")
    assert_error(admin_api.delete("/schedules/s"), 404, "not_found")
    assert Task.objects.filter(pk=task["id"]).exists()


def test_trigger_enqueues_one_task_now(admin_api, producer, reports):
    create(admin_api, name="s", queue="reports", every_seconds=3600, payload={"r": 1}, kind="reports.x", priority=2)
    before = admin_api.get("/schedules/s").json()
    response = admin_api.post("/schedules/s/trigger")
    assert response.status_code == 201, response.content
    task = response.json()
    assert tuple(task) == TASK_FIELDS
    assert (task["queue"], task["payload"], task["kind"], task["priority"]) == ("reports", {"r": 1}, "reports.x", 2)
    assert task["status"] == "pending" and task["idempotency_key"] is None
    assert producer.get(f"/queues/reports/tasks/{task['id']}").status_code == 200
    after = admin_api.get("/schedules/s").json()
    assert after["last_task_id"] == task["id"]
    assert after["last_run_at"] is not None
    assert after["next_run_at"] == before["next_run_at"]
    second = admin_api.post("/schedules/s/trigger/")
    assert second.status_code == 201 and second.json()["id"] != task["id"]


def test_trigger_takes_no_body_or_an_empty_object_and_refuses_fields(admin_api, reports):
    create(admin_api, name="s", queue="reports", every_seconds=60)
    assert admin_api.post("/schedules/s/trigger", {}, format="json").status_code == 201
    error = assert_error(admin_api.post("/schedules/s/trigger", {"payload": {"x": 1}}, format="json"), 400)
    assert list(error["fields"]) == ["payload"]
    assert_error(admin_api.post("/schedules/s/trigger", [1], format="json"), 400, "validation_error")
    assert Task.objects.count() == 1


def test_trigger_works_on_a_paused_schedule(admin_api, reports):
    create(admin_api, name="s", queue="reports", every_seconds=60, paused=True)
    assert admin_api.post("/schedules/s/trigger").status_code == 201
    assert Task.objects.filter(queue__name="reports").count() == 1


def test_deleting_the_queue_deletes_its_schedules(admin_api, reports):
    create(admin_api, name="s", queue="reports", every_seconds=60)
    assert admin_api.delete("/queues/reports").status_code == 204
    assert_error(admin_api.get("/schedules/s"), 404, "not_found")
    assert not Queue.objects.filter(name="reports").exists()


# --- auth and methods -----------------------------------------------------------------------------

ENDPOINTS = [
    ("get", "/schedules"),
    ("post", "/schedules"),
    ("get", "/schedules/s"),
    ("patch", "/schedules/s"),
    ("delete", "/schedules/s"),
    ("post", "/schedules/s/trigger"),
]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_no_key_is_401_and_other_roles_are_403(client_for, method, path):
    assert_error(getattr(APIClient(), method)(path, {}, format="json"), 401, "unauthorized")
    for role in ("producer", "worker"):
        assert_error(getattr(client_for(role), method)(path, {}, format="json"), 403, "forbidden")


@pytest.mark.parametrize(
    ("method", "path"),
    [("put", "/schedules"), ("delete", "/schedules"), ("put", "/schedules/s"), ("get", "/schedules/s/trigger")],
)
def test_other_methods_are_405(admin_api, reports, method, path):
    create(admin_api, name="s", queue="reports", every_seconds=60)
    assert_error(getattr(admin_api, method)(path, {}, format="json"), 405, "method_not_allowed")
