"""The reference worker (``python -m taskforge_client.worker``) against a live TaskForge: real API
processes, loops, Postgres and Redis; worker processes run with Django imports refused."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime

import pytest

from taskforge_client import ConnectionFailed, ServerError, TaskForgeClient
from taskforge_client.worker.config import load_config
from taskforge_client.worker.runner import Runner
from tests.factories import QueueFactory
from tests.integration.workers.conftest import LEASE_SECONDS, WITHOUT_DJANGO, transitions, wait_for
from tests.live import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def status_of(client, queue, task_id):
    return client.get_task(queue, task_id)["status"]


def finished(client, queue, ids, statuses=("done",)):
    def check():
        return all(status_of(client, queue, task_id) in statuses for task_id in ids)

    return check


def at(entry) -> datetime:
    return datetime.fromisoformat(entry["at"])


def test_worker_runs_demo_handler_acks_results_and_batches_acks(taskforge):
    QueueFactory(name="jobs")
    producer = taskforge.client("producer")
    tasks = producer.enqueue_batch("jobs", [{"payload": {"sleep_ms": 50, "n": n}} for n in range(24)])
    worker = taskforge.start_worker(
        "--queue",
        "jobs",
        "--concurrency",
        "8",
        "--log-level",
        "DEBUG",  # a line per task
        worker_id="happy",
        handler="taskforge_client.demo:handle",
    )

    wait_for(finished(producer, "jobs", [t["id"] for t in tasks]), what="every task done")
    for created in tasks:
        task = producer.get_task("jobs", created["id"])
        assert task["attempts"] == 1
        assert task["result"]["handled_by"] == "happy"
        assert task["result"]["attempt"] == 1
        assert task["result"]["slept_ms"] >= 50
        assert [to for _, to, _ in transitions(task)][-1] == "done"
    # Tasks that finish together share one ack/batch call.
    assert any(line["count"] > 1 for line in worker.events("ack.batch")), worker.lines()
    acked = [line["task_id"] for line in worker.events("task.acked")]
    assert sorted(acked) == sorted(t["id"] for t in tasks)
    assert all(line["worker_id"] == "happy" for line in worker.lines())
    assert worker.terminate() == 0


def test_at_info_the_worker_writes_summaries_not_a_line_per_task(taskforge):
    QueueFactory(name="jobs")
    producer = taskforge.client("producer")
    tasks = producer.enqueue_batch("jobs", [{"payload": {"n": n}} for n in range(40)])
    worker = taskforge.start_worker("--queue", "jobs", "--summary-interval", "0.5", worker_id="quiet")

    wait_for(finished(producer, "jobs", [t["id"] for t in tasks]), what="every task done")
    wait_for(lambda: sum(line["done"] for line in worker.events("worker.summary")) == 40, what="the summaries")
    assert worker.terminate() == 0
    summary = worker.events("worker.summary")[0]
    assert summary["level"] == "info" and summary["rate"] > 0
    assert {"done", "retried", "dead", "lost", "held"} <= summary.keys()
    assert not [line for line in worker.lines() if line["event"].startswith(("task.", "ack."))]
    assert worker.events("worker.stop")[0]["done"] == 40
    assert worker.events("worker.start")[0]["prefetch"] == 25


@pytest.mark.loops("run_scheduler")
def test_failed_attempt_is_retried_then_succeeds(taskforge):
    QueueFactory(name="jobs", retry_base_ms=100, retry_max_delay_ms=200)
    producer = taskforge.client("producer")
    created = producer.enqueue("jobs", {"mode": "flaky"})
    taskforge.start_worker("--queue", "jobs", worker_id="w-flaky")

    wait_for(finished(producer, "jobs", [created["id"]]), what="the flaky task done")
    task = producer.get_task("jobs", created["id"])
    assert task["attempts"] == 2
    assert task["result"] == {"mode": "flaky", "attempt": 2, "worker_id": "w-flaky"}
    failure = next(h for h in task["history"] if h["to_status"] == "retry")
    assert failure["detail"].startswith("tests.integration.workers.handlers.FlakyError: first attempt fails")
    assert "Traceback" in failure["detail"]


@pytest.mark.loops("run_scheduler")
def test_payload_asking_to_fail_ends_in_the_dead_letter_queue(taskforge):
    for name in ("demo", "jobs"):
        QueueFactory(name=name, max_retries=2, retry_base_ms=100, retry_max_delay_ms=200)
    producer, admin = taskforge.client("producer"), taskforge.client("admin")
    doomed = producer.enqueue("demo", {"fail": True})
    hopeless = producer.enqueue("jobs", {"mode": "fail_now"})
    taskforge.start_worker("--queue", "demo", worker_id="w-demo", handler="taskforge_client.demo:handle")
    taskforge.start_worker("--queue", "jobs", worker_id="w-tests")

    # The demo handler fails every attempt: 1 + max_retries runs, then the DLQ.
    wait_for(finished(producer, "demo", [doomed["id"]], ("dead",)), what="the failing task dead")
    task = producer.get_task("demo", doomed["id"])
    assert task["attempts"] == 3
    assert task["last_error"].startswith("taskforge_client.demo.DemoFailure: payload asked to fail (attempt 3)")
    (entry,) = admin.dead_letters("demo")
    assert (entry["id"], entry["attempts"]) == (doomed["id"], 3)
    # Fail() skips the remaining attempts.
    wait_for(finished(producer, "jobs", [hopeless["id"]], ("dead",)), what="the Fail() task dead")
    task = producer.get_task("jobs", hopeless["id"])
    assert (task["attempts"], task["last_error"]) == (1, "not worth retrying")
    (entry,) = admin.dead_letters("jobs")
    assert entry["id"] == hopeless["id"]


@pytest.mark.loops("run_watchdog")
def test_heartbeats_keep_a_task_alive_three_times_longer_than_its_lease(taskforge):
    QueueFactory(name="jobs")
    producer = taskforge.client("producer")
    runtime_ms = 3 * LEASE_SECONDS * 1000
    created = producer.enqueue("jobs", {"sleep_ms": runtime_ms})
    worker = taskforge.start_worker("--queue", "jobs", worker_id="w-long", handler="taskforge_client.demo:handle")

    wait_for(finished(producer, "jobs", [created["id"]]), timeout=30, what="the long task done")
    task = producer.get_task("jobs", created["id"])
    assert task["attempts"] == 1
    assert transitions(task) == [
        (None, "pending", None),
        ("pending", "claimed", "w-long"),
        ("claimed", "executing", "w-long"),
        ("executing", "done", "w-long"),
    ]
    assert task["result"]["slept_ms"] >= runtime_ms
    assert not worker.events("task.lease_lost")


@pytest.mark.loops("run_scheduler", "run_watchdog")
def test_task_of_a_killed_worker_runs_again_elsewhere_and_finishes_once(taskforge, tmp_path):
    QueueFactory(name="jobs", retry_base_ms=100, retry_max_delay_ms=200)
    producer = taskforge.client("producer")
    log = tmp_path / "completions.jsonl"
    created = producer.enqueue("jobs", {"mode": "record", "log": str(log), "sleep_first_ms": 5000})
    doomed = taskforge.start_worker("--queue", "jobs", worker_id="w-doomed")
    wait_for(lambda: status_of(producer, "jobs", created["id"]) == "claimed", what="the first claim")
    time.sleep(0.3)  # mid-task
    doomed.process.send_signal(signal.SIGKILL)
    doomed.process.wait(5)

    rescuer = taskforge.start_worker("--queue", "jobs", worker_id="w-rescuer")
    wait_for(finished(producer, "jobs", [created["id"]]), what="the task done by the rescuer")
    task = producer.get_task("jobs", created["id"])
    assert task["attempts"] == 2
    assert task["claimed_by"] == "w-rescuer"
    claims = [worker for _, to, worker in transitions(task) if to == "claimed"]
    assert claims == ["w-doomed", "w-rescuer"]
    expiry = next(
        h for h in task["history"] if h["from_status"] in ("claimed", "executing") and h["to_status"] == "retry"
    )
    assert "lease" in expiry["detail"]
    assert [to for _, to, _ in transitions(task)].count("done") == 1
    # The side effect happened once: the killed worker never got to complete it.
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [run["worker_id"] for run in runs] == ["w-rescuer"]
    assert rescuer.terminate() == 0


def test_sigterm_acks_the_running_task_and_hands_back_the_rest(taskforge):
    QueueFactory(name="jobs")
    producer = taskforge.client("producer")
    quick = producer.enqueue("jobs", {"sleep_ms": 1000}, priority=1)
    slow = producer.enqueue("jobs", {"sleep_ms": 30_000}, priority=2)
    waiting = producer.enqueue("jobs", {"sleep_ms": 10}, priority=9)
    worker = taskforge.start_worker(
        "--queue",
        "jobs",
        "--concurrency",
        "2",
        "--grace-seconds",
        "2",
        "--log-level",
        "DEBUG",
        worker_id="w-drain",
        handler="taskforge_client.demo:handle",
    )
    wait_for(lambda: len(worker.events("task.start")) == 2, what="both slots busy")
    started = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(15) == 0
    assert time.monotonic() - started < 6

    assert status_of(producer, "jobs", quick["id"]) == "done"
    handed_back = producer.get_task("jobs", slow["id"])
    assert handed_back["status"] in ("retry", "pending")
    assert handed_back["last_error"] == "worker shutting down"
    assert [e["task_id"] for e in worker.events("task.handed_back")] == [slow["id"]]
    # Claiming stopped at once: the third task was never taken.
    never = producer.get_task("jobs", waiting["id"])
    assert (never["status"], never["attempts"]) == ("pending", 0)
    assert worker.events("worker.stop")[0]["exit_code"] == 0


def test_tasks_held_but_never_started_are_handed_back_without_using_up_an_attempt(taskforge):
    """With ``max_retries`` 0 a task has one attempt: one the worker only held must not spend it."""
    QueueFactory(name="once", max_retries=0)
    producer = taskforge.client("producer")
    # Quick tasks first: once the worker knows their pace it prefetches beyond its one slot.
    quick = [producer.enqueue("once", {"sleep_ms": 10}, priority=1)["id"] for _ in range(5)]
    running = producer.enqueue("once", {"sleep_ms": 30_000}, priority=2)
    held = [producer.enqueue("once", {"sleep_ms": 10}, priority=5)["id"] for _ in range(3)]
    worker = taskforge.start_worker(
        "--queue", "once", "--concurrency", "1", "--grace-seconds", "1", "--log-level", "DEBUG",
        worker_id="w-holder", handler="taskforge_client.demo:handle",
    )  # fmt: skip
    wait_for(lambda: len(worker.events("task.start")) == len(quick) + 1, what="the slow task running")
    wait_for(
        lambda: all(producer.get_task("once", task_id)["status"] == "claimed" for task_id in held),
        what="the other tasks prefetched by the worker",
    )
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(15) == 0

    for task_id in held:
        task = producer.get_task("once", task_id)
        assert task["status"] in ("retry", "pending") and task["attempts"] == 0, task
        assert task["last_error"] is None  # no attempt failed: nothing to report
        # Held tasks get heartbeats (their leases must live), so they may be ``executing`` by then.
        assert transitions(task)[-1][:2] in (("claimed", "retry"), ("executing", "retry"))
    # The one that ran and was cut off at the end of the grace period used its only attempt.
    cut_off = producer.get_task("once", running["id"])
    assert (cut_off["status"], cut_off["attempts"], cut_off["last_error"]) == ("dead", 1, "worker shutting down")


@pytest.mark.loops("run_scheduler")
def test_handler_retry_after_delays_the_next_attempt(taskforge):
    QueueFactory(name="jobs", retry_base_ms=100, retry_max_delay_ms=200)
    producer = taskforge.client("producer")
    created = producer.enqueue("jobs", {"mode": "retry_after", "after": 2})
    taskforge.start_worker("--queue", "jobs", worker_id="w-later")

    wait_for(finished(producer, "jobs", [created["id"]]), what="the delayed retry done")
    task = producer.get_task("jobs", created["id"])
    nack = next(h for h in task["history"] if h["to_status"] == "retry")
    second_claim = [h for h in task["history"] if h["to_status"] == "claimed"][1]
    assert nack["detail"] == "upstream asked us to come back later"
    # The handler's 2 s, not the queue's 100 ms backoff (a promoted task keeps its scheduled_at).
    due = datetime.fromisoformat(task["scheduled_at"])
    assert abs((due - at(nack)).total_seconds() - 2) < 0.05
    assert at(second_claim) >= due


@pytest.mark.loops("run_watchdog")
def test_heartbeat_lease_lost_drops_the_task_and_never_acks_it(taskforge):
    QueueFactory(name="jobs", retry_base_ms=60_000, retry_max_delay_ms=60_000)
    producer = taskforge.client("producer")
    created = producer.enqueue("jobs", {"sleep_ms": 20_000})
    paused = taskforge.start_worker(
        "--queue", "jobs", "--log-level", "DEBUG", worker_id="w-paused", handler="taskforge_client.demo:handle"
    )
    wait_for(lambda: paused.events("task.start"), what="the task started")
    # A long GC pause, or a stopped VM: the lease runs out and the watchdog reclaims the task.
    paused.process.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: status_of(producer, "jobs", created["id"]) == "retry", what="the lease expired")
    finally:
        paused.process.send_signal(signal.SIGCONT)
    wait_for(lambda: paused.events("task.dropped"), what="the worker dropping the task")

    assert paused.events("task.lease_lost")
    assert not paused.events("task.acked")
    task = producer.get_task("jobs", created["id"])
    assert task["status"] == "retry"
    assert "done" not in [to for _, to, _ in transitions(task)]
    assert paused.terminate() == 0


def test_after_a_long_poll_that_waited_the_worker_asks_again_at_once(taskforge):
    """--poll-interval paces empty answers that did not wait, not the end of a full long poll."""
    QueueFactory(name="quiet")
    producer = taskforge.client("producer")
    worker = taskforge.start_worker("--queue", "quiet", "--poll-interval", "60", worker_id="patient")
    wait_for(lambda: worker.events("worker.start"), what="the worker started")
    time.sleep(2.5)  # past at least one empty long poll of 1 s
    created = producer.enqueue("quiet", {"n": 1})
    started = time.monotonic()
    wait_for(finished(producer, "quiet", [created["id"]]), what="the task done", timeout=20)
    assert time.monotonic() - started < 15  # not 60 s of --poll-interval


@pytest.mark.parametrize(("cooldown", "gathered"), [("4", True), ("0", False)])
def test_tasks_trickling_in_after_a_claim_wait_for_the_claim_cooldown_and_come_in_one_claim(
    taskforge, cooldown, gathered
):
    """After a claim that got fewer tasks than it asked for, the next starts --claim-cooldown after it."""
    QueueFactory(name="stream")
    producer = taskforge.client("producer")
    worker = taskforge.start_worker("--queue", "stream", "--claim-cooldown", cooldown, worker_id=f"gather-{cooldown}")
    wait_for(lambda: worker.events("worker.start"), what="the worker started")
    first = producer.enqueue("stream", {"n": 0})
    wait_for(lambda: producer.get_task("stream", first["id"])["claimed_at"], what="the first task claimed")
    # Enqueued while the worker cools down after claiming the first one alone.
    later = [producer.enqueue("stream", {"n": n}) for n in (1, 2)]
    ids = [first["id"], *(task["id"] for task in later)]
    wait_for(finished(producer, "stream", ids), what="every task done", timeout=20)
    first_claim, *later_claims = (at({"at": producer.get_task("stream", i)["claimed_at"]}) for i in ids)
    gap = (later_claims[0] - first_claim).total_seconds()
    if gathered:
        # The claim that got the first task began at most --wait-seconds (1 s) and a moment before it.
        assert gap >= 2.5, gap
        assert abs((later_claims[1] - later_claims[0]).total_seconds()) < 0.05  # one claim took both
    else:
        assert gap < 1.5, gap
    assert worker.terminate() == 0


@pytest.mark.django_db(transaction=False)
@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {"TASKFORGE_API_KEY": ""}, "TASKFORGE_API_KEY is not set"),
        (["--concurrency", "0"], {}, "--concurrency / WORKER_CONCURRENCY must be between 1 and 100"),
        ([], {"WORKER_POLL_INTERVAL": "soon"}, "WORKER_POLL_INTERVAL must be a number, got 'soon'"),
        ([], {"HEARTBEAT_INTERVAL": "-1"}, "HEARTBEAT_INTERVAL must be between"),
        ([], {"WORKER_REQUEST_TIMEOUT": "5"}, "must exceed the long-poll wait"),
        (["--handler", "no_colon"], {}, "--handler must look like package.module:function"),
        (["--handler", "taskforge_client.demo:missing"], {}, "has no attribute 'missing'"),
        ([], {"TASKFORGE_API_URL": "localhost:8080"}, "must start with http:// or https://"),
        (["--log-level", "chatty"], {}, "--log-level / WORKER_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR"),
    ],
)
def test_bad_configuration_exits_2_naming_the_setting(argv, env, message):
    environ = {**os.environ, "TASKFORGE_API_KEY": "k", "DJANGO_SETTINGS_MODULE": "", **env}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_DJANGO, "--handler", "taskforge_client.demo:handle", *argv],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


class PartitionedClient(TaskForgeClient):
    """A client whose heartbeats never get through (a half-broken network path)."""

    def heartbeat(self, worker_id, task_id, lease_token=None, **options):  # type: ignore[no-untyped-def]
        raise ConnectionFailed("heartbeat: network unreachable")


@pytest.mark.loops("run_watchdog")
def test_ack_answered_lease_lost_is_dropped_not_retried_as_ours(taskforge, caplog):
    QueueFactory(name="jobs", retry_base_ms=60_000, retry_max_delay_ms=60_000)
    producer = taskforge.client("producer")
    created = producer.enqueue("jobs", {"n": 1})

    def outlive_the_lease(payload, job):  # type: ignore[no-untyped-def]
        # Without heartbeats the watchdog reclaims the task while we still work on it.
        wait_for(lambda: status_of(producer, "jobs", job.id) == "retry", what="the lease expired")
        return {"late": True}

    exit_code = run_until(taskforge, caplog, PartitionedClient, outlive_the_lease, "w-partitioned", "task.lease_lost")
    assert exit_code == 0
    assert events(caplog, "heartbeat.error")
    assert not events(caplog, "task.acked")
    task = producer.get_task("jobs", created["id"])
    assert (task["status"], task["result"]) == ("retry", None)
    assert "done" not in [to for _, to, _ in transitions(task)]


class LostAnswerClient(TaskForgeClient):
    """A client whose first ack reaches TaskForge but whose answer is a 500 (the ack itself committed)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.failed_once = False

    def ack(self, worker_id, task_id, lease_token=None, result=None):  # type: ignore[no-untyped-def]
        answer = super().ack(worker_id, task_id, lease_token, result)
        if not self.failed_once:
            self.failed_once = True
            raise ServerError("ack answered 500", status=500)
        return answer


def test_an_ack_answered_500_is_retried_not_abandoned(taskforge, caplog):
    QueueFactory(name="jobs")
    producer = taskforge.client("producer")
    created = producer.enqueue("jobs", {"n": 1})
    exit_code = run_until(taskforge, caplog, LostAnswerClient, lambda payload, job: {"ok": True}, "w-500", "task.acked")
    assert exit_code == 0
    assert events(caplog, "ack.retry")
    assert not events(caplog, "ack.error")
    task = producer.get_task("jobs", created["id"])
    assert (task["status"], task["result"], task["attempts"]) == ("done", {"ok": True}, 1)


def run_until(taskforge, caplog, client_class, handler, worker_id: str, event: str) -> int:  # type: ignore[no-untyped-def]
    """Run an in-process Runner on queue "jobs" with ``client_class`` until it logs ``event``; its exit code."""
    config = load_config(
        ["--queue", "jobs", "--worker-id", worker_id, "--wait-seconds", "1", "--grace-seconds", "1"],
        {"TASKFORGE_API_URL": taskforge.url, "TASKFORGE_API_KEY": taskforge.keys["worker"]},
    )
    runner = Runner(config, handler, client_class(taskforge.url, taskforge.keys["worker"]))
    caplog.set_level(logging.DEBUG, logger="taskforge.worker")
    outcome: list[int] = []
    thread = threading.Thread(target=lambda: outcome.append(runner.run()))
    thread.start()
    try:
        wait_for(lambda: events(caplog, event), what=f"the worker logged {event}")
    finally:
        runner.stop()
        thread.join(15)
    assert len(outcome) == 1, "the runner did not stop"
    return outcome[0]


def events(caplog, name):  # type: ignore[no-untyped-def]
    return [record for record in caplog.records if getattr(record, "event", None) == name]
