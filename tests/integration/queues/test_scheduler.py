"""The two-tier scheduler: Postgres -> Redis working set each tick, Redis -> lanes on time."""

from __future__ import annotations

import statistics
import threading
import time
from datetime import timedelta

import httpx
import pytest
from django.core.management import call_command
from django.utils import timezone

from queues.apikeys import create_key
from queues.dispatch import doorbell, lanes
from queues.loops import scheduler
from queues.management.commands.run_scheduler import Command as SchedulerCommand
from queues.models import Task
from taskforge.infra.redis import redis_client
from tests.factories import QueueFactory, TaskFactory

# Real commits: the scheduler's queries use Postgres' now(), which a test
# transaction would freeze at the test's start.
pytestmark = pytest.mark.django_db(transaction=True)


def scheduled(name: str = "email_jobs") -> dict[str, float]:
    return {m.decode(): s for m, s in redis_client().zrange(lanes.scheduled_key(name), 0, -1, withscores=True)}


def lane(name: str = "email_jobs") -> list[str]:
    return [m.decode() for m in redis_client().zrange(lanes.ready_key(name), 0, -1)]


def in_seconds(seconds: float):
    return timezone.now() + timedelta(seconds=seconds)


def wait_for_output(stack, *needles: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not all(needle in stack.output() for needle in needles):
        assert time.monotonic() < deadline, stack.output()
        time.sleep(0.1)


def sleep_until(moment) -> None:
    time.sleep(max(0.0, (moment - timezone.now()).total_seconds()) + 0.02)


def test_slow_tick_loads_what_is_due_within_the_horizon(queue):
    soon = TaskFactory(queue=queue, scheduled_at=in_seconds(1.5), priority=3)
    later = TaskFactory(queue=queue, scheduled_at=in_seconds(60))
    retry_soon = TaskFactory(queue=queue, retry_due=True, scheduled_at=in_seconds(2))
    scheduler.slow_tick()
    entries = scheduled()
    score = lanes.lane_score(3, soon.scheduled_at)
    assert entries == {
        f"{score}|{soon.id}": lanes.due_ms(soon.scheduled_at),
        f"r|{retry_soon.id}": lanes.due_ms(retry_soon.scheduled_at),
    }
    assert str(later.id) not in str(entries)
    assert Task.objects.get(pk=retry_soon.id).status == "retry"  # promoted at its time, not before
    assert "email_jobs" in lanes.scheduled_queues()


def test_slow_tick_promotes_due_retries_into_the_lane(queue):
    due = TaskFactory(queue=queue, retry_due=True)
    assert scheduler.slow_tick() == 1
    assert Task.objects.get(pk=due.id).status == "pending"
    assert lane() == [str(due.id)]


def test_fast_tick_moves_due_entries_into_the_lane_and_rings(queue):
    task = TaskFactory(queue=queue, scheduled_at=in_seconds(1), priority=2)
    scheduler.slow_tick()
    pubsub = redis_client().pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(doorbell.channel())
    assert scheduler.fast_tick() == 0  # not due yet
    assert lane() == []
    sleep_until(task.scheduled_at)
    assert scheduler.fast_tick() == 1
    assert lane() == [str(task.id)]
    assert scheduled() == {}
    deadline = time.monotonic() + 2
    message = None
    while message is None and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.1)  # None also for the subscribe confirmation
    assert message is not None and message["data"] == b"1 email_jobs"
    pubsub.close()


def test_a_retry_is_promoted_when_its_time_comes(queue):
    retry = TaskFactory(queue=queue, retry_due=True, scheduled_at=in_seconds(1))
    scheduler.slow_tick()
    assert Task.objects.get(pk=retry.id).status == "retry"
    sleep_until(retry.scheduled_at)
    assert scheduler.fast_tick() == 1
    assert Task.objects.get(pk=retry.id).status == "pending"
    assert lane() == [str(retry.id)]


def test_a_flush_is_rebuilt_by_the_next_slow_tick(queue):
    task = TaskFactory(queue=queue, scheduled_at=in_seconds(2))
    scheduler.slow_tick()
    redis_client().flushdb()
    scheduler.slow_tick()
    assert [member.split("|")[1] for member in scheduled()] == [str(task.id)]


def test_two_schedulers_move_each_entry_once(queue):
    due = in_seconds(1.5)
    tasks = [TaskFactory(queue=queue, scheduled_at=due) for _ in range(20)]
    scheduler.slow_tick()
    scheduler.slow_tick()  # a second replica loads the same entries: same members, same scores
    sleep_until(due)
    moved: list[int] = []
    threads = [threading.Thread(target=lambda: moved.append(scheduler.fast_tick())) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(moved) == 20
    assert sorted(lane()) == sorted(str(t.id) for t in tasks)


def test_scheduler_command_tick_and_once(queue):
    due = TaskFactory(queue=queue, retry_due=True)
    assert SchedulerCommand().tick() == 1
    assert Task.objects.get(pk=due.id).status == "pending"
    again = TaskFactory(queue=queue, retry_due=True)
    call_command("run_scheduler", "--once")
    assert Task.objects.get(pk=again.id).status == "pending"


@pytest.mark.slow
def test_delayed_tasks_are_claimed_within_a_second_of_their_time(live_stack):
    """200 tasks due over the next 4 s, idle long-polling workers: lateness from Postgres."""
    QueueFactory(name="timed")
    _, key = create_key("live-admin", "admin")
    url = live_stack.start_api()
    live_stack.start_loop("run_scheduler")
    live_stack.start_loop("run_dispatcher")
    wait_for_output(live_stack, "scheduler started", "dispatcher started")  # measure the loops, not their boot
    headers = {"Authorization": f"Bearer {key}"}
    first_due = timezone.now() + timedelta(seconds=1.5)
    items = [
        {"payload": {"n": n}, "scheduled_at": (first_due + timedelta(milliseconds=20 * n)).isoformat()}
        for n in range(200)
    ]
    assert httpx.post(f"{url}/queues/timed/tasks/batch", json={"tasks": items}, headers=headers, timeout=30).is_success
    stop = time.monotonic() + 8
    claimed: list[str] = []

    def work(n: int) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=15) as client:
            while time.monotonic() < stop and len(claimed) < len(items):
                body = {"worker_id": f"w{n}", "queue": "timed", "max_tasks": 50, "wait_seconds": 2}
                tasks = client.post("/workers/claim", json=body).json()["tasks"]
                claimed.extend(t["id"] for t in tasks)
                if tasks:
                    acks = [{"task_id": t["id"], "lease_token": t["lease_token"]} for t in tasks]
                    client.post("/workers/ack/batch", json={"worker_id": f"w{n}", "items": acks})

    threads = [threading.Thread(target=work, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)

    rows = list(Task.objects.values_list("scheduled_at", "claimed_at"))
    assert all(claimed is not None for _, claimed in rows), "some tasks were never claimed"
    lateness = sorted((claimed - due).total_seconds() for due, claimed in rows)
    p50 = statistics.median(lateness)
    p99 = lateness[int(len(lateness) * 0.99) - 1]
    print(
        f"\nscheduling lateness over {len(rows)} tasks: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
        f"max {lateness[-1] * 1000:.0f} ms, min {lateness[0] * 1000:.0f} ms"
    )
    assert lateness[0] >= 0, "a task was claimed before its scheduled_at"
    assert p99 < 1.0
