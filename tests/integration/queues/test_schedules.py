"""The schedules loop against Postgres: one task per fire time, catch-up, pause, idempotency, DST.

``now`` is passed to the pass (the statement's ``coalesce(now, now())``) instead of sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction

import taskforge.infra.redis
from queues.loops import schedules
from queues.management.commands import run_scheduler, run_schedules
from queues.models import Queue, Schedule, Task
from queues.schedules import firing
from tests.factories import QueueFactory, TaskFactory
from tests.live import free_port

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 5, 20, 12, 0, 30, tzinfo=UTC)


def make_schedule(name: str = "s", *, next_run_at: datetime | None, **fields) -> Schedule:  # type: ignore[no-untyped-def]
    queue = fields.pop("queue", None) or QueueFactory(name=f"q-{name}")
    fields.setdefault("every_seconds", None if "cron" in fields else 60)
    return Schedule.objects.create(name=name, queue=queue, next_run_at=next_run_at, **fields)


def keys(schedule: Schedule) -> list[str]:
    return sorted(Task.objects.filter(queue=schedule.queue).values_list("idempotency_key", flat=True))


def key(name: str, at: str) -> str:
    return f"schedule:{name}:{at}"


def test_a_due_schedule_enqueues_one_task_per_fire_time_and_advances():
    schedule = make_schedule(next_run_at=datetime(2026, 5, 20, 12, 0, tzinfo=UTC), payload={"r": 1}, kind="k.x")
    result = schedules.run_once(now=NOW)
    assert (result.schedules, result.tasks) == (1, 1)
    (task,) = Task.objects.filter(queue=schedule.queue)
    assert task.idempotency_key == key("s", "2026-05-20T12:00:00Z")
    assert (task.payload, task.kind, task.priority, task.status) == ({"r": 1}, "k.x", 5, "pending")
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 5, 20, 12, 1, tzinfo=UTC)
    assert schedule.last_run_at == datetime(2026, 5, 20, 12, 0, tzinfo=UTC)
    assert schedule.last_task_id == task.id
    assert schedules.run_once(now=NOW) == schedules.Pass()  # no longer due


def test_a_schedule_not_yet_due_does_not_fire():
    make_schedule(next_run_at=NOW + timedelta(seconds=1))
    assert schedules.run_once(now=NOW).tasks == 0
    assert Task.objects.count() == 0


def test_paused_schedules_do_not_fire_even_with_a_past_next_run():
    make_schedule(next_run_at=NOW - timedelta(minutes=5), paused=True)
    make_schedule("unplanned", next_run_at=None)
    assert schedules.run_once(now=NOW) == schedules.Pass()
    assert Task.objects.count() == 0


def test_fire_times_within_the_grace_are_late_not_missed_each_fires():
    # A scheduler 40 s behind (a restart): each of the 40 fire times has its task, whatever catch_up says.
    schedule = make_schedule(next_run_at=NOW - timedelta(seconds=40), every_seconds=1, catch_up="none")
    assert schedules.run_once(now=NOW).tasks == 41
    assert len(keys(schedule)) == 41
    assert key("s", "2026-05-20T11:59:50Z") in keys(schedule)


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [
        ("none", ["2026-05-20T12:00:00Z"]),
        ("latest", ["2026-05-20T11:59:00Z", "2026-05-20T12:00:00Z"]),
        ("all", [f"2026-05-20T11:{minute}:00Z" for minute in range(51, 60)] + ["2026-05-20T12:00:00Z"]),
    ],
)
def test_catch_up_policies_for_fire_times_missed_while_no_scheduler_ran(catch_up, expected):
    # Fire times 11:51 ... 12:00; the ones before 11:59:30 (NOW less the grace) were missed.
    schedule = make_schedule(next_run_at=datetime(2026, 5, 20, 11, 51, tzinfo=UTC), catch_up=catch_up)
    assert schedules.run_once(now=NOW).tasks == len(expected)
    assert keys(schedule) == sorted(key("s", at) for at in expected)
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 5, 20, 12, 1, tzinfo=UTC)
    assert schedule.last_run_at == datetime(2026, 5, 20, 12, 0, tzinfo=UTC)


def test_catch_up_all_enqueues_at_most_100_the_latest():
    # The interval's series runs through next_run_at (xx:xx:30 here), so NOW itself is a fire time.
    schedule = make_schedule(next_run_at=NOW - timedelta(days=2), catch_up="all")
    assert schedules.run_once(now=NOW).tasks == 100
    found = keys(schedule)
    assert len(found) == 100
    assert found[-1] == key("s", "2026-05-20T12:00:30Z")
    assert found[0] == key("s", "2026-05-20T10:21:30Z")
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 5, 20, 12, 1, 30, tzinfo=UTC)


def test_firing_the_same_fire_times_again_creates_nothing():
    # As if a second process computed the same fire times from a stale row: the keys hold.
    start = datetime(2026, 5, 20, 11, 55, tzinfo=UTC)
    schedule = make_schedule(next_run_at=start, catch_up="all")
    assert schedules.run_once(now=NOW).tasks == 6
    first = set(Task.objects.values_list("id", flat=True))
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=start)
    schedules.run_once(now=NOW)
    assert set(Task.objects.values_list("id", flat=True)) == first
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 5, 20, 12, 1, tzinfo=UTC)
    assert schedule.last_task_id in first


def test_a_key_taken_by_a_producers_task_does_not_stop_the_schedule():
    queue = QueueFactory(name="taken")
    TaskFactory(queue=queue, idempotency_key=key("s", "2026-05-20T12:00:00Z"), request_fingerprint="f" * 64)
    schedule = make_schedule(queue=queue, next_run_at=datetime(2026, 5, 20, 12, 0, tzinfo=UTC))
    schedules.run_once(now=NOW)
    assert Task.objects.filter(queue=queue).count() == 1
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 5, 20, 12, 1, tzinfo=UTC)


def test_a_broken_row_is_parked_and_the_others_still_fire():
    broken = make_schedule("broken", cron="* * * * *", next_run_at=NOW - timedelta(seconds=5), timezone="Not/AZone")
    good = make_schedule("good", next_run_at=datetime(2026, 5, 20, 12, 0, tzinfo=UTC))
    schedules.run_once(now=NOW)
    broken.refresh_from_db()
    assert broken.next_run_at is None
    assert len(keys(good)) == 1


def test_cron_in_a_spring_forward_gap_fires_once_at_the_gaps_end():
    # Europe/Berlin, 2026-03-29: 02:00-03:00 does not exist; "30 2 * * *" fires at 03:00 CEST (01:00Z).
    schedule = make_schedule(
        cron="30 2 * * *", timezone="Europe/Berlin", next_run_at=datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    )
    assert schedules.run_once(now=datetime(2026, 3, 29, 1, 0, 5, tzinfo=UTC)).tasks == 1
    assert keys(schedule) == [key("s", "2026-03-29T01:00:00Z")]
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)


def test_cron_in_a_fall_back_repeat_fires_once():
    # America/New_York, 2026-11-01: 01:00-02:00 happens twice; "30 1 * * *" fires at the first 01:30 (05:30Z).
    schedule = make_schedule(
        cron="30 1 * * *", timezone="America/New_York", next_run_at=datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
    )
    assert schedules.run_once(now=datetime(2026, 11, 1, 5, 30, 1, tzinfo=UTC)).tasks == 1
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 11, 2, 6, 30, tzinfo=UTC)  # not 06:30Z the same day
    assert schedules.run_once(now=datetime(2026, 11, 1, 6, 30, 1, tzinfo=UTC)).tasks == 0


def test_the_scheduler_command_fires_schedules_in_its_postgres_tier():
    # The test's transaction fixes now(): a next_run_at before it is due.
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    schedule = make_schedule(next_run_at=now - timedelta(seconds=3), every_seconds=1)
    command = run_scheduler.Command()
    assert command.tick() >= 3
    assert command.last_schedules.schedules == 1
    assert len(keys(schedule)) >= 3
    assert not command.more_work_pending(0)


def test_run_schedules_once_and_its_batch(monkeypatch):
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    for index in range(3):
        make_schedule(f"s{index}", next_run_at=now - timedelta(seconds=1), every_seconds=1)
    monkeypatch.setattr(firing, "FIRE_BATCH", 2)
    command = run_schedules.Command()
    assert command.tick() >= 2
    assert command.more_work_pending(0)  # a full batch: more may be due
    call_command("run_schedules", "--once")
    assert Schedule.objects.filter(next_run_at__lte=now).count() == 0
    assert Task.objects.count() >= 3


@pytest.mark.django_db(transaction=True)
def test_concurrent_passes_fire_each_schedule_once():
    for index in range(20):
        make_schedule(f"c{index}", next_run_at=NOW - timedelta(seconds=30), catch_up="none")
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def fire() -> None:
        try:
            barrier.wait()
            schedules.run_once(now=NOW)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=fire) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    # 30 s late: 12:00:00 ... due once each (a 60 s interval), one task per schedule and fire time.
    assert Task.objects.count() == 20
    assert len(set(Task.objects.values_list("queue_id", "idempotency_key"))) == 20


@pytest.mark.django_db(transaction=True)
def test_a_pass_skips_a_schedule_whose_queue_is_locked_instead_of_waiting():
    # A queue being changed or deleted holds its row FOR UPDATE; the pass must not wait for it
    # (a queue delete locks the queue, then its schedules: waiting here could deadlock).
    locked = make_schedule("locked", next_run_at=datetime(2026, 5, 20, 12, 0, tzinfo=UTC))
    free = make_schedule("free", next_run_at=datetime(2026, 5, 20, 12, 0, tzinfo=UTC))
    holding, release = threading.Event(), threading.Event()

    def hold_queue_lock() -> None:
        try:
            with transaction.atomic():
                Queue.objects.select_for_update().get(pk=locked.queue_id)
                holding.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_queue_lock)
    holder.start()
    try:
        assert holding.wait(10)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # a wait would fail the test, not hang it
        assert schedules.run_once(now=NOW) == schedules.Pass(schedules=1, tasks=1)
        assert keys(free) == [key("free", "2026-05-20T12:00:00Z")] and keys(locked) == []
    finally:
        release.set()
        holder.join()
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert schedules.run_once(now=NOW) == schedules.Pass(schedules=1, tasks=1)
    assert keys(locked) == [key("locked", "2026-05-20T12:00:00Z")]


def test_schedules_fire_with_redis_down(settings, monkeypatch, django_capture_on_commit_callbacks):
    # Postgres is the truth: the tasks are created; the lanes catch up from Postgres later.
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setattr(taskforge.infra.redis, "_client", None)
    schedule = make_schedule(next_run_at=datetime(2026, 5, 20, 12, 0, tzinfo=UTC))
    with django_capture_on_commit_callbacks(execute=True):
        assert schedules.run_once(now=NOW).tasks == 1
    assert keys(schedule) == [key("s", "2026-05-20T12:00:00Z")]
