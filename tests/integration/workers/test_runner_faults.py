"""The reference worker under faults, against a live TaskForge: an in-process ``Runner`` whose
client (a real ``TaskForgeClient``, some calls made slow, failing or answered by a broken proxy)
talks to real API processes, loops, Postgres and Redis."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from taskforge_client import ConnectionFailed, TaskForgeClient
from taskforge_client.worker.config import load_config
from taskforge_client.worker.runner import HANDBACK_SECONDS, Runner
from tests.factories import QueueFactory
from tests.integration.workers.conftest import LEASE_SECONDS, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@contextmanager
def running(taskforge, caplog, client: TaskForgeClient, handler, *flags: str) -> Iterator[Runner]:
    """A Runner working on queue "jobs" in a thread while the block runs; stopped (and joined) after it."""
    config = load_config(
        ["--queue", "jobs", "--worker-id", "w-faults", "--wait-seconds", "1", "--poll-interval", "0.2", *flags],
        {"TASKFORGE_API_URL": taskforge.url, "TASKFORGE_API_KEY": taskforge.keys["worker"], "HEARTBEAT_INTERVAL": "1"},
    )
    runner = Runner(config, handler, client)
    caplog.set_level(logging.DEBUG, logger="taskforge.worker")
    exit_codes: list[int] = []
    thread = threading.Thread(target=lambda: exit_codes.append(runner.run()), daemon=True)
    thread.start()
    try:
        yield runner
    finally:
        runner.stop()
        thread.join(30)
    assert exit_codes == [0], "the runner did not stop cleanly"


def events(caplog, name: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if getattr(record, "event", None) == name]


def statuses(client: TaskForgeClient, ids: list[str]) -> dict[str, str]:
    return {task_id: client.get_task("jobs", task_id)["status"] for task_id in ids}


def test_a_result_that_cannot_be_encoded_is_nacked_and_later_tasks_are_still_acked(taskforge, caplog):
    QueueFactory(name="jobs", max_retries=0)
    producer = taskforge.client("producer")
    bad = producer.enqueue("jobs", {"bad": True}, priority=9)["id"]
    good = [task["id"] for task in producer.enqueue_batch("jobs", [{"payload": {"n": n}} for n in range(6)])]

    def handler(payload: dict[str, Any], job: Any) -> dict[str, Any]:
        # A lone surrogate: a str in Python, but no UTF-8 encoding of it exists.
        return {"s": "\ud800"} if payload.get("bad") else {"n": payload["n"]}

    client = taskforge.client("worker")
    with running(taskforge, caplog, client, handler):
        wait_for(lambda: statuses(producer, [bad]) == {bad: "dead"}, what="the bad result nacked")
        more = [task["id"] for task in producer.enqueue_batch("jobs", [{"payload": {"n": n}} for n in range(3)])]
        wait_for(lambda: set(statuses(producer, good + more).values()) == {"done"}, what="every other task acked")
    task = producer.get_task("jobs", bad)
    assert task["last_error"].startswith("result is not valid JSON: ")
    assert "surrogates not allowed" in task["last_error"]
    assert producer.get_task("jobs", more[-1])["result"] == {"n": 2}


def test_a_handler_raising_system_exit_or_keyboard_interrupt_does_not_end_the_one_pool_thread(taskforge, caplog):
    QueueFactory(name="jobs", max_retries=0)
    producer = taskforge.client("producer")
    raising = {
        producer.enqueue("jobs", {"raise": "exit"}, priority=1)["id"]: "SystemExit",
        producer.enqueue("jobs", {"raise": "interrupt"}, priority=2)["id"]: "KeyboardInterrupt",
    }
    later = [producer.enqueue("jobs", {"n": n}, priority=5)["id"] for n in range(4)]

    def handler(payload: dict[str, Any], job: Any) -> dict[str, Any]:
        if payload.get("raise") == "exit":
            raise SystemExit(3)
        if payload.get("raise") == "interrupt":
            raise KeyboardInterrupt
        return {"n": payload["n"]}

    client = taskforge.client("worker")
    # One handler thread: had either exception ended it, no later task would ever run.
    with running(taskforge, caplog, client, handler, "--concurrency", "1"):
        wait_for(lambda: set(statuses(producer, later).values()) == {"done"}, what="the later tasks acked")
    for task_id, name in raising.items():
        task = producer.get_task("jobs", task_id)
        assert task["status"] == "dead" and task["last_error"].startswith(name), task


class ProxyPage(httpx.BaseTransport):
    """A real transport, except that the first heartbeat is answered 200 with a proxy's HTML page."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.pages_served = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/workers/heartbeat" and not self.pages_served:
            self.pages_served += 1
            return httpx.Response(200, text="<html><body>Welcome to the captive portal</body></html>")
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


@pytest.mark.loops("run_watchdog")
def test_a_heartbeat_answered_with_a_page_that_is_not_json_does_not_stop_the_heartbeats(taskforge, caplog):
    QueueFactory(name="jobs", retry_base_ms=60_000, retry_max_delay_ms=60_000)
    producer = taskforge.client("producer")
    task_id = producer.enqueue("jobs", {"n": 1})["id"]

    def outlive_three_leases(payload: dict[str, Any], job: Any) -> dict[str, Any]:
        job.cancelled.wait(3 * LEASE_SECONDS)
        return {"cancelled": job.cancelled.is_set()}

    transport = ProxyPage()
    client = TaskForgeClient(taskforge.url, taskforge.keys["worker"], transport=transport)
    with running(taskforge, caplog, client, outlive_three_leases):
        wait_for(lambda: statuses(producer, [task_id]) == {task_id: "done"}, timeout=30, what="the task done")
    assert transport.pages_served == 1
    assert events(caplog, "heartbeat.error")
    task = producer.get_task("jobs", task_id)
    assert (task["attempts"], task["result"]) == (1, {"cancelled": False})


class OneStuckHeartbeat(TaskForgeClient):
    """Heartbeats of one task hang on a dead connection for ``hang`` seconds; the others go through."""

    def __init__(self, *args: Any, stuck: Callable[[], str | None], hang: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stuck = stuck
        self.hang = hang

    def heartbeat(self, worker_id, task_id, lease_token=None, **options):
        if str(task_id) == self.stuck():
            time.sleep(self.hang)
            raise ConnectionFailed("heartbeat: read timed out")
        return super().heartbeat(worker_id, task_id, lease_token, **options)


@pytest.mark.loops("run_watchdog")
def test_one_stuck_heartbeat_does_not_cost_the_other_leases(taskforge, caplog):
    QueueFactory(name="jobs", retry_base_ms=60_000, retry_max_delay_ms=60_000)
    producer = taskforge.client("producer")
    stuck_id = producer.enqueue("jobs", {"stuck": True}, priority=9)["id"]
    others = [task["id"] for task in producer.enqueue_batch("jobs", [{"payload": {"n": n}} for n in range(2)])]

    def outlive_three_leases(payload: dict[str, Any], job: Any) -> dict[str, Any]:
        job.cancelled.wait(3 * LEASE_SECONDS)
        return {"cancelled": job.cancelled.is_set()}

    client = OneStuckHeartbeat(taskforge.url, taskforge.keys["worker"], stuck=lambda: stuck_id, hang=4 * LEASE_SECONDS)
    with running(taskforge, caplog, client, outlive_three_leases, "--concurrency", "3"):
        wait_for(lambda: set(statuses(producer, others).values()) == {"done"}, timeout=30, what="the others done")
    for task_id in others:
        task = producer.get_task("jobs", task_id)
        assert (task["attempts"], task["result"]) == (1, {"cancelled": False})
    lost = [record.task_id for record in events(caplog, "task.lease_lost")]  # type: ignore[attr-defined]
    assert lost == [stuck_id]  # given up once its lease had run out, the others kept


class AcksNeverConfirmed(TaskForgeClient):
    """Claims and heartbeats work; every ack fails (the database behind acks is down, say)."""

    def ack(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionFailed("ack: connection reset")

    def ack_batch(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionFailed("ack: connection reset")


def test_while_acks_fail_the_worker_stops_claiming_at_its_ceiling(taskforge, caplog):
    QueueFactory(name="jobs")
    producer = taskforge.client("producer")
    ids = [task["id"] for task in producer.enqueue_batch("jobs", [{"payload": {"n": n}} for n in range(40)])]
    client = AcksNeverConfirmed(taskforge.url, taskforge.keys["worker"])
    with running(
        taskforge,
        caplog,
        client,
        lambda payload, job: {"ok": True},
        "--concurrency",
        "2",
        "--prefetch",
        "1",
        "--grace-seconds",
        "1",
    ):
        wait_for(lambda: events(caplog, "ack.retry"), what="a failed ack")
        time.sleep(3)  # time for many claims, were the slots freed before the acks are confirmed
        claimed = [task_id for task_id in ids if producer.get_task("jobs", task_id)["attempts"] > 0]
    # Two handlers plus one round of unconfirmed outcomes: 4, not every task of the queue.
    assert 0 < len(claimed) <= 4, claimed


class AcksHang(TaskForgeClient):
    """Every ack hangs (a black-holed connection) far longer than the shutdown may take."""

    def ack(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(60)
        raise ConnectionFailed("ack: read timed out")

    ack_batch = ack


def test_shutdown_ends_within_the_grace_period_and_the_handback_time_whatever_the_api_does(taskforge, caplog):
    QueueFactory(name="jobs")
    producer = taskforge.client("producer")
    producer.enqueue("jobs", {"n": 1})
    client = AcksHang(taskforge.url, taskforge.keys["worker"], timeout=30)
    with running(taskforge, caplog, client, lambda payload, job: {"ok": True}, "--grace-seconds", "1") as runner:
        wait_for(lambda: events(caplog, "task.succeeded"), what="the handler returned")
        started = time.monotonic()
    # The orchestrator kills after its own timeout (40 s in the deploy files): the worker is gone before.
    assert time.monotonic() - started < 1 + HANDBACK_SECONDS + 2
    assert runner.stopping.is_set()


class TimeLimitedClaims(TaskForgeClient):
    """Claimed tasks carry ``timeout_seconds`` (the v2 field), as a server with a queue time limit sends them."""

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        tasks = super().claim(*args, **kwargs)
        for task in tasks:
            if task.get("timeout_seconds") is None:
                task["timeout_seconds"] = 1
        return tasks


def test_a_task_past_its_time_limit_is_nacked_without_waiting_for_its_handler(taskforge, caplog):
    QueueFactory(name="jobs", max_retries=0)
    producer = taskforge.client("producer")
    slow = producer.enqueue("jobs", {"slow": True}, priority=9)["id"]
    released = threading.Event()
    finished_late: list[bool] = []

    def handler(payload: dict[str, Any], job: Any) -> dict[str, Any]:
        if payload.get("slow"):
            released.wait(30)  # ignores job.cancelled: a thread cannot be stopped from outside
            finished_late.append(job.cancelled.is_set())
        return {"ok": True}

    client = TimeLimitedClaims(taskforge.url, taskforge.keys["worker"])
    with running(taskforge, caplog, client, handler, "--concurrency", "2"):
        wait_for(lambda: statuses(producer, [slow]) == {slow: "dead"}, what="the slow task nacked")
        assert not finished_late  # its handler still runs: the nack did not wait for it
        after = producer.enqueue("jobs", {"n": 1})["id"]
        wait_for(lambda: statuses(producer, [after]) == {after: "done"}, what="the next task run on the free slot")
        released.set()
        wait_for(lambda: events(caplog, "task.dropped"), what="the late result dropped")
    assert finished_late == [True]
    task = producer.get_task("jobs", slow)
    assert (task["last_error"], task["result"]) == ("execution timed out after 1 s", None)
    assert events(caplog, "task.timed_out")
