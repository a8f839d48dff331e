"""Long polls: woken by a Redis doorbell, served on the event loop, never starving other requests."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

import taskforge.infra.redis
from queues.apikeys import create_key
from queues.dispatch import doorbell, outage
from queues.loops import scheduler
from queues.models import Task
from tests.factories import QueueFactory, TaskFactory
from tests.integration.api.support import assert_error, enqueue
from tests.live import free_port

pytestmark = pytest.mark.django_db(transaction=True)


class Poll(threading.Thread):
    """One long-polling claim in its own thread (its own connection, its own event loop)."""

    def __init__(self, key: str, **body) -> None:
        super().__init__()
        self.key, self.body = key, {"worker_id": "w-poll", **body}
        self.response = None
        self.seconds = 0.0

    def run(self) -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.key}")
        started = time.monotonic()
        try:
            self.response = client.post("/workers/claim", self.body, format="json")
        finally:
            self.seconds = time.monotonic() - started
            connection.close()

    def tasks(self) -> list[dict]:
        self.join(40)
        assert self.response is not None and self.response.status_code == 200, self.response
        return self.response.json()["tasks"]


def waiting(poll: Poll, settle: float = 0.7) -> Poll:
    poll.start()
    time.sleep(settle)  # past its first attempts, waiting on the doorbell
    assert poll.is_alive()
    return poll


@pytest.fixture
def worker_key(make_key: Callable[[str], str]) -> str:
    return make_key("worker")


def test_an_enqueue_ends_the_wait_at_once(worker_key, producer, queue):
    poll = waiting(Poll(worker_key, queue="email_jobs", wait_seconds=20))
    task = enqueue(producer)
    assert [t["id"] for t in poll.tasks()] == [task["id"]]
    assert poll.seconds < 5
    assert poll.tasks()[0]["lease_token"]


def test_a_claim_without_queue_is_woken_by_any_queue(worker_key, producer):
    QueueFactory(name="other")
    poll = waiting(Poll(worker_key, wait_seconds=20))
    task = enqueue(producer, "other")
    assert [t["id"] for t in poll.tasks()] == [task["id"]]
    assert poll.seconds < 5


def test_resuming_a_paused_queue_ends_the_wait(worker_key, admin_api, producer, queue):
    admin_api.patch("/queues/email_jobs", {"paused": True}, format="json")
    task = enqueue(producer)
    poll = waiting(Poll(worker_key, queue="email_jobs", wait_seconds=20))
    assert admin_api.patch("/queues/email_jobs", {"paused": False}, format="json").status_code == 200
    assert [t["id"] for t in poll.tasks()] == [task["id"]]
    assert poll.seconds < 5


def test_a_replay_ends_the_wait(worker_key, admin_api, queue):
    dead = TaskFactory(queue=queue, dead=True)
    poll = waiting(Poll(worker_key, queue="email_jobs", wait_seconds=20))
    assert admin_api.post(f"/queues/email_jobs/dlq/{dead.id}/replay").status_code == 200
    assert [t["id"] for t in poll.tasks()] == [str(dead.id)]
    assert poll.seconds < 5


def test_a_delayed_task_becoming_due_ends_the_wait(worker_key, producer, queue):
    due = timezone.now() + timedelta(seconds=1.5)
    task = enqueue(producer, scheduled_at=due.isoformat())
    poll = waiting(Poll(worker_key, queue="email_jobs", wait_seconds=20))
    while timezone.now() < due + timedelta(milliseconds=20):
        scheduler.fast_tick()  # the scheduler's fast tier, in this process
        time.sleep(0.02)
    scheduler.fast_tick()
    assert [t["id"] for t in poll.tasks()] == [task["id"]]
    assert poll.seconds < 5
    claimed_at = Task.objects.get(pk=task["id"]).claimed_at
    assert due <= claimed_at < due + timedelta(seconds=1)


def test_long_poll_with_redis_down_still_finds_tasks_from_postgres(worker_key, producer, queue, settings, monkeypatch):
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setattr(taskforge.infra.redis, "_client", None)
    monkeypatch.setattr(outage, "_redis_down_until", 0.0)
    poll = waiting(Poll(worker_key, queue="email_jobs", wait_seconds=10), settle=1.5)
    task = enqueue(producer)  # no doorbell: the waiter re-checks Postgres on a short timer
    assert [t["id"] for t in poll.tasks()] == [task["id"]]
    assert poll.seconds < 1.5 + doorbell.DISCONNECTED_RECHECK_SECONDS + 2


def test_claim_keeps_auth_order_and_validation(client_for, queue):
    anonymous = APIClient()
    assert_error(anonymous.post("/workers/claim", {"worker_id": "w"}, format="json"), 401, "unauthorized")
    producer = client_for("producer")
    assert_error(producer.post("/workers/claim", {"worker_id": "w"}, format="json"), 403, "forbidden")
    worker = client_for("worker")
    assert_error(worker.get("/workers/claim"), 405, "method_not_allowed")
    bad = worker.post("/workers/claim", {"worker_id": "w", "wait_seconds": 31}, format="json")
    assert_error(bad, 400, "validation_error", fields=["wait_seconds"])
    unknown = worker.post("/workers/claim", {"worker_id": "w", "queue": "nope", "wait_seconds": 5}, format="json")
    assert_error(unknown, 404, "not_found")


# --- against the production server ------------------------------------------------------------


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _worker_pid(master_pid: int) -> int:
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    return int(children[0])


def _wait_until_idle(pid: int, timeout: float) -> float:
    """Wait until the process burns (almost) no CPU: every poll has had its first attempt."""
    started = time.monotonic()
    last = _cpu_seconds(pid)
    while time.monotonic() - started < timeout:
        time.sleep(0.3)
        now = _cpu_seconds(pid)
        if now - last < 0.02:
            break
        last = now
    return time.monotonic() - started


@pytest.mark.slow
def test_a_hundred_idle_long_polls_do_not_starve_an_enqueue(live_stack):
    """One API process, 100 long polls waiting 5 s, then an enqueue: it must answer at once."""
    QueueFactory(name="idle")
    _, key = create_key("live-admin", "admin")
    url = live_stack.start_api(workers=1)
    worker_pid = _worker_pid(live_stack.processes[-1].pid)
    headers = {"Authorization": f"Bearer {key}"}
    body = {"worker_id": "idle", "queue": "idle", "wait_seconds": 5}
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    with httpx.Client(base_url=url, headers=headers, timeout=30, limits=limits) as client:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=100) as pool:
            polls = [pool.submit(client.post, "/workers/claim", json=body) for _ in range(100)]
            time.sleep(0.5)
            settled = 0.5 + _wait_until_idle(worker_pid, timeout=3.5)  # all 100 in and waiting
            waiting_polls = sum(not p.done() for p in polls)
            threads = _threads(worker_pid)
            before = time.monotonic()
            created = client.post("/queues/idle/tasks", json={"payload": {"n": 1}})
            enqueue_seconds = time.monotonic() - before
            answered_at = time.monotonic() - started
            still_waiting = sum(not p.done() for p in polls)
            results = [p.result() for p in polls]
    print(
        f"\n100 idle long polls: server idle after {settled:.2f} s with {waiting_polls} waiting and "
        f"{threads} threads; enqueue answered in {enqueue_seconds * 1000:.0f} ms, at {answered_at:.2f} s "
        f"of the 5 s wait, {still_waiting} polls still waiting"
    )
    assert created.status_code == 201, created.text
    assert waiting_polls == 100
    # Waiting polls hold no thread: the server's own (its pool of TASKFORGE_THREADS and a few more).
    assert threads < 40, threads
    # Answered while the polls were still waiting: at most the one it woke had returned.
    assert still_waiting >= 99
    assert enqueue_seconds < 1.5  # (~25 ms on an idle machine)
    assert all(r.status_code == 200 for r in results), {r.status_code for r in results}
    winners = [r.json()["tasks"] for r in results if r.json()["tasks"]]
    assert [[t["id"] for t in w] for w in winners] == [[created.json()["id"]]]
    # A bell for one task woke one waiter, not the herd: the others slept to the end of their wait.
    assert min(r.elapsed.total_seconds() for r in results if not r.json()["tasks"]) >= 4.5


def test_past_the_per_key_cap_a_poll_answers_at_once_and_other_keys_still_wait(worker_key, make_key, queue, settings):
    settings.TASKFORGE_MAX_LONG_POLLS_PER_KEY = 2
    first = waiting(Poll(worker_key, queue="email_jobs", wait_seconds=4))
    second = waiting(Poll(worker_key, queue="email_jobs", wait_seconds=4))
    third = Poll(worker_key, queue="email_jobs", wait_seconds=4)
    third.start()
    assert third.tasks() == [] and third.seconds < 2  # answered as with wait_seconds 0
    other = Poll(make_key("worker"), queue="email_jobs", wait_seconds=1)
    other.start()
    assert other.tasks() == [] and other.seconds >= 0.9  # the cap is per key
    assert first.tasks() == second.tasks() == []
    assert min(first.seconds, second.seconds) >= 3.5
    # Their slots are free again: the key's next poll waits.
    again = Poll(worker_key, queue="email_jobs", wait_seconds=1)
    again.start()
    assert again.tasks() == [] and again.seconds >= 0.9


@pytest.mark.slow
def test_the_per_key_cap_holds_at_the_lean_edge_of_a_real_server(live_stack):
    QueueFactory(name="capped")
    _, key = create_key("capped-worker", "worker")
    url = live_stack.start_api(workers=1, extra_env={"TASKFORGE_MAX_LONG_POLLS_PER_KEY": "2"})
    body = {"worker_id": "capped", "queue": "capped", "wait_seconds": 3}
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client, ThreadPoolExecutor(2) as pool:
        held = [pool.submit(client.post, "/workers/claim", json=body) for _ in range(2)]
        time.sleep(1.0)
        started = time.monotonic()
        extra = client.post("/workers/claim", json=body)
        extra_seconds = time.monotonic() - started
        results = [poll.result() for poll in held]
    assert extra.status_code == 200 and extra.json()["tasks"] == []
    assert extra_seconds < 1.5, extra_seconds
    assert all(r.status_code == 200 and r.elapsed.total_seconds() >= 2.5 for r in results)
    assert "longpoll.capped" in live_stack.output()
