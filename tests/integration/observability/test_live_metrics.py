"""Metrics and transition logs across real processes.

Two API servers (one with two gunicorn worker processes) and a separate
watchdog process share Postgres and Redis. Known traffic goes through the
HTTP API; every scrape, whichever server and worker process answers it, must
report exactly that traffic, and every transition in the task histories must
appear as one JSON log line in some process's stdout.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from itertools import cycle
from pathlib import Path

import httpx
import pytest

from queues.apikeys import create_key
from queues.models import Status, TaskEvent
from tests.factories import QueueFactory
from tests.integration.observability.scrape import parse, value

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LEASE = {"TASKFORGE_HEARTBEAT_TIMEOUT": "2"}
WATCHDOG = {**LEASE, "TASKFORGE_WATCHDOG_INTERVAL": "1"}
TRANSITION_FIELDS = {"ts", "level", "event", "task_id", "queue", "worker_id", "from_status", "to_status", "duration_ms"}

ENQUEUED_A = 16  # one request each
ENQUEUED_B = 3  # one batch request
ACKED = 5
NACKED_DEAD = 3
NACKED_RETRY = 2
EXPIRED = 3
CANCELLED = 2


def _json_lines(paths: list[Path]) -> list[tuple[str, dict]]:
    lines = []
    for path in paths:
        for raw in path.read_text(errors="replace").splitlines():
            if raw.startswith("{"):
                lines.append((path.name, json.loads(raw)))
    return lines


def _wait_for(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_metrics_and_logs_are_right_across_processes(live_stack) -> None:  # type: ignore[no-untyped-def]
    QueueFactory(name="live_a", max_retries=2)
    QueueFactory(name="live_b", max_retries=2)
    _, key = create_key("observer", "admin")
    auth = {"Authorization": f"Bearer {key}"}
    live_stack.start_loop("run_watchdog", extra_env=WATCHDOG)
    with ThreadPoolExecutor(2) as pool:  # the servers boot side by side
        booting = [pool.submit(live_stack.start_api, workers=n, extra_env=LEASE) for n in (2, 1)]
        two_workers, one_worker = (future.result() for future in booting)
    apis = cycle([two_workers, one_worker])

    def call(method: str, path: str, **kwargs) -> httpx.Response:  # type: ignore[no-untyped-def]
        # A new connection per call, so gunicorn spreads them over its worker processes.
        response = httpx.request(method, f"{next(apis)}{path}", headers=auth, timeout=10, **kwargs)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response

    # N enqueued, one request each, alternating servers; one traced request id.
    traced = httpx.post(
        f"{two_workers}/queues/live_a/tasks",
        json={"payload": {"n": 0}},
        headers={**auth, "X-Request-ID": "trace-abc-123"},
    )
    assert traced.status_code == 201 and traced.headers["X-Request-ID"] == "trace-abc-123"
    for n in range(1, ENQUEUED_A):
        call("POST", "/queues/live_a/tasks", json={"payload": {"n": n}})
    call("POST", "/queues/live_b/tasks/batch", json={"tasks": [{"payload": {"b": n}} for n in range(ENQUEUED_B)]})

    def claim_one(queue: str, worker_id: str) -> dict:
        (task,) = call("POST", "/workers/claim", json={"worker_id": worker_id, "queue": queue}).json()["tasks"]
        return task

    lease = {"worker_id": "w-good"}
    for _ in range(ACKED):
        task = claim_one("live_a", "w-good")
        call("POST", "/workers/heartbeat", json={**lease, "task_id": task["id"], "lease_token": task["lease_token"]})
        call("POST", "/workers/ack", json={**lease, "task_id": task["id"], "result": {"ok": True}})
    for _ in range(NACKED_DEAD):
        task = claim_one("live_a", "w-good")
        call("POST", "/workers/nack", json={**lease, "task_id": task["id"], "error": "bad input", "retry": False})
    for _ in range(NACKED_RETRY):
        task = claim_one("live_a", "w-good")
        body = {**lease, "task_id": task["id"], "error": "flaky", "retry_after_seconds": 3600}
        call("POST", "/workers/nack", json=body)
    task = claim_one("live_b", "w-good")
    call("POST", "/workers/ack/batch", json={**lease, "items": [{"task_id": task["id"]}]})
    # L tasks claimed by a worker that then goes silent: the watchdog process expires them.
    lost = call("POST", "/workers/claim", json={"worker_id": "w-lost", "queue": "live_a", "max_tasks": EXPIRED})
    assert len(lost.json()["tasks"]) == EXPIRED
    pending = call("GET", "/queues/live_a/tasks", params={"status": "pending"}).json()["results"]
    for task in pending[:CANCELLED]:
        call("DELETE", f"/queues/live_a/tasks/{task['id']}")

    def scrape(url: str) -> dict:
        response = httpx.get(f"{url}/metrics", timeout=10)
        assert response.status_code == 200
        return parse(response.text)

    _wait_for(
        lambda: (
            value(scrape(one_worker), "taskforge_tasks_completed_total", queue="live_a", status="expired") == EXPIRED
        ),
        timeout=20,
        what="the watchdog to expire the silent worker's leases",
    )

    expected_completed = {
        "done": ACKED,
        "failed": NACKED_RETRY,
        "dead": NACKED_DEAD,
        "expired": EXPIRED,
        "cancelled": CANCELLED,
    }
    attempts_a = ACKED + NACKED_RETRY + NACKED_DEAD + EXPIRED
    left_pending = ENQUEUED_A - attempts_a - CANCELLED
    expected_depth = {
        "pending": left_pending,
        "scheduled": 0,
        "claimed": 0,
        "executing": 0,
        "retry": NACKED_RETRY + EXPIRED,
        "done": ACKED,
        "dead": NACKED_DEAD,
        "cancelled": CANCELLED,
    }
    single_enqueues = Counter()
    for url in [two_workers, one_worker] * 3:  # each server several times: any worker process may answer
        samples = scrape(url)
        assert value(samples, "taskforge_tasks_enqueued_total", queue="live_a") == ENQUEUED_A
        assert value(samples, "taskforge_tasks_enqueued_total", queue="live_b") == ENQUEUED_B
        completed = {
            status: value(samples, "taskforge_tasks_completed_total", queue="live_a", status=status)
            for status in expected_completed
        }
        assert completed == expected_completed
        assert value(samples, "taskforge_tasks_completed_total", queue="live_b", status="done") == 1
        assert value(samples, "taskforge_task_execution_duration_seconds_count", queue="live_a") == attempts_a
        assert value(samples, "taskforge_task_execution_duration_seconds_count", queue="live_b") == 1
        depth = {
            status: value(samples, "taskforge_queue_depth", queue="live_a", status=status) for status in expected_depth
        }
        assert depth == expected_depth
        assert value(samples, "taskforge_dlq_depth", queue="live_a") == NACKED_DEAD
        assert value(samples, "taskforge_worker_heartbeat_age_seconds", worker_id="w-good") is not None
        assert value(samples, "taskforge_worker_heartbeat_age_seconds", worker_id="w-lost") >= 2
        # django-prometheus request metrics: per server, summed over its worker processes.
        created = value(
            samples,
            "django_http_responses_total_by_status_view_method_total",
            status="201",
            view="task-list",
            method="POST",
        )
        previous = single_enqueues.setdefault(url, created)
        assert created == previous, "every worker process of one server reports the same total"
    assert sum(single_enqueues.values()) == ENQUEUED_A

    live_stack.stop()  # flushes and closes every log
    _check_transition_logs(live_stack.logs)


def _check_transition_logs(logs: list[Path]) -> None:
    lines = _json_lines(logs)
    transitions = [(source, line) for source, line in lines if line.get("event") == "task.transition"]
    for _source, line in transitions:
        assert set(line) >= TRANSITION_FIELDS, line
        assert line["level"] == "INFO"
        datetime.fromisoformat(line["ts"])
        assert isinstance(line["duration_ms"], int | float) and line["duration_ms"] >= 0
        assert line["to_status"] in Status.values
    logged = Counter((line["task_id"], line["from_status"], line["to_status"]) for _, line in transitions)
    history = Counter(
        (str(task_id), from_status, to_status)
        for task_id, from_status, to_status in TaskEvent.objects.filter(kind=TaskEvent.Kind.TRANSITION).values_list(
            "task_id", "from_status", "to_status"
        )
    )
    assert sum(history.values()) > ENQUEUED_A + ENQUEUED_B
    assert logged == history, "exactly one log line per transition in the task histories"

    expiries = [
        (source, line)
        for source, line in transitions
        if line["from_status"] == "claimed" and line["worker_id"] == "w-lost"
    ]
    assert len(expiries) == EXPIRED
    assert all(source.startswith("run_watchdog") for source, _ in expiries), "expiries are logged by the watchdog"
    claims = [line for _, line in transitions if line["to_status"] == "claimed"]
    assert {line["worker_id"] for line in claims} == {"w-good", "w-lost"}

    traced = [line for _, line in lines if line.get("request_id") == "trace-abc-123"]
    assert {line["event"] for line in traced} == {"task.transition", "http.request"}, traced
    requests = [line for _, line in lines if line.get("event") == "http.request"]
    assert requests and all(line.get("request_id") for line in requests)
