"""Logs: one JSON object per line on stdout (or text), request ids, transitions, loops."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest
from django.test import Client

from queues import lifecycle
from tests.factories import QueueFactory, TaskFactory

ISO_UTC_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) +[\w.]+ .+$")


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def events(lines: list[dict], event: str) -> list[dict]:
    return [line for line in lines if line.get("event") == event]


@pytest.mark.django_db
def test_request_id_is_honoured_echoed_and_logged(stdout_log) -> None:  # type: ignore[no-untyped-def]
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="lb-7f3a.1:2")
    assert response["X-Request-ID"] == "lb-7f3a.1:2"
    (line,) = events(stdout_log(), "http.request")
    assert line["request_id"] == "lb-7f3a.1:2"
    assert (line["method"], line["path"], line["status"], line["level"]) == ("GET", "/healthz", 200, "INFO")
    assert line["duration_ms"] >= 0
    assert ISO_UTC_MS.match(line["ts"])


@pytest.mark.django_db
@pytest.mark.parametrize("offered", [None, "", "has spaces", "x" * 129, 'quote"d', "new\nline"])
def test_a_missing_or_unsafe_request_id_is_replaced(offered: str | None, stdout_log) -> None:  # type: ignore[no-untyped-def]
    headers = {} if offered is None else {"HTTP_X_REQUEST_ID": offered}
    response = Client().get("/queues", **headers)  # also for errors (401 here)
    assert response.status_code == 401
    request_id = response["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", request_id)
    (line,) = events(stdout_log(), "http.request")
    assert line["request_id"] == request_id
    assert line["status"] == 401


@pytest.mark.django_db
def test_each_transition_is_one_json_line(stdout_log, django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    queue = QueueFactory(name="mail")
    with django_capture_on_commit_callbacks(execute=True):
        ((row, _),) = lifecycle.enqueue(queue, [lifecycle.NewTask(payload={"to": "x"})])
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.claim("w-1", [queue.id], 1)
    lines = events(stdout_log(), "task.transition")
    assert [(line["from_status"], line["to_status"]) for line in lines] == [(None, "pending"), ("pending", "claimed")]
    enqueued, claimed = lines
    for line in lines:
        assert line["task_id"] == str(row["id"])
        assert line["queue"] == "mail"
        assert line["level"] == "INFO"
        assert line["logger"] == "taskforge.transitions"
        assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
        assert ISO_UTC_MS.match(line["ts"])
    assert enqueued["worker_id"] is None and claimed["worker_id"] == "w-1"
    assert claimed["attempts"] == 1


def _run_watchdog(live_stack, log_format: str) -> tuple[Path, int]:  # type: ignore[no-untyped-def]
    env = {
        "DJANGO_LOG_FORMAT": log_format,
        "DJANGO_LOG_LEVEL": "DEBUG",
        "TASKFORGE_WATCHDOG_INTERVAL": "1",
        "TASKFORGE_HEARTBEAT_TIMEOUT": "2",
    }
    process = live_stack.start_loop("run_watchdog", extra_env=env)
    log = live_stack.logs[-1]
    deadline = time.monotonic() + 30
    while "reclaimed" not in (log.read_text() if log.exists() else ""):
        assert process.poll() is None, live_stack.output()
        assert time.monotonic() < deadline, live_stack.output()
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    return log, process.wait(15)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_loop_logs_its_work_and_what_is_unusual(live_stack) -> None:  # type: ignore[no-untyped-def]
    task = TaskFactory(queue=QueueFactory(name="mail"), expired_lease=True, claimed_by="w-gone")
    log, exit_code = _run_watchdog(live_stack, "json")
    assert exit_code == 0
    lines = json_lines(log.read_text())
    assert events(lines, "loop.start")[0]["loop"] == "watchdog"
    (transition,) = events(lines, "task.transition")
    assert (transition["task_id"], transition["from_status"], transition["to_status"]) == (
        str(task.id),
        "executing",
        "retry",
    )
    assert transition["worker_id"] == "w-gone", "an expiry names the worker that lost the lease"
    assert transition["duration_ms"] > 0
    (expired,) = events(lines, "watchdog.expired")
    assert (expired["level"], expired["count"]) == ("WARNING", 1)
    ticks = events(lines, "loop.tick")
    assert ticks and ticks[0]["level"] == "DEBUG" and ticks[0]["handled"] == 1 and "duration_ms" in ticks[0]
    assert events(lines, "loop.stop")
    assert all(line.get("request_id") is None for line in lines), "no request in a loop"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_text_log_format_is_for_people(live_stack) -> None:  # type: ignore[no-untyped-def]
    TaskFactory(queue=QueueFactory(name="mail"), expired_lease=True)
    log, exit_code = _run_watchdog(live_stack, "text")
    assert exit_code == 0
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert lines and not any(line.startswith("{") for line in lines)
    assert all(TEXT_LINE.match(line) for line in lines), lines
    assert any(re.search(r"WARNING +taskforge\.loops\.watchdog reclaimed 1 task", line) for line in lines)
    assert any(re.search(r"INFO +taskforge\.transitions task \S+ executing -> retry in mail", line) for line in lines)
