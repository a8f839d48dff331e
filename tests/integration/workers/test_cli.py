"""The ``taskforge`` command against a live TaskForge API: every subcommand, both output forms, the exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.factories import QueueFactory
from tests.integration.workers.conftest import TaskForge

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SUBCOMMANDS = (
    *("queues", "stats", "enqueue", "task", "dlq", "replay"),
    *("pause", "resume", "schedules", "workers", "worker"),
)


def run(
    forge: TaskForge | None, *args: str, role: str = "admin", key: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin"}  # the installed package alone, none of the server's settings
    if forge is not None:
        env |= {"TASKFORGE_API_URL": forge.url, "TASKFORGE_API_KEY": key if key is not None else forge.keys[role]}
    return subprocess.run(
        [sys.executable, "-m", "taskforge_client", *args], env=env, capture_output=True, text=True, timeout=60
    )


def answer(forge: TaskForge, *args: str, role: str = "admin") -> Any:
    done = run(forge, "--json", *args, role=role)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_help_lists_every_subcommand_and_each_has_its_own():
    done = run(None, "--help")
    assert done.returncode == 0
    for name in SUBCOMMANDS:
        assert name in done.stdout
        sub = run(None, name, "--help")
        assert sub.returncode == 0, sub.stderr
        assert sub.stdout.startswith("usage:")
    assert run(None, "nonsense").returncode == 2


def test_a_task_from_enqueue_to_dead_letter_and_back(taskforge: TaskForge):
    QueueFactory(name="cli_jobs", max_retries=0)
    created = answer(
        taskforge, "enqueue", "cli_jobs", '{"user_id": "abc123"}', "--kind", "emails.welcome", role="producer"
    )
    assert created["status"] == "pending" and created["kind"] == "emails.welcome"
    assert created["payload"] == {"user_id": "abc123"}

    listed = run(taskforge, "queues")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:4] == ["QUEUE", "PAUSED", "RATE/S", "PENDING"]
    assert next(row.split()[:4] for row in rows if row.startswith("cli_jobs")) == ["cli_jobs", "no", "-", "1"]
    assert answer(taskforge, "stats", "cli_jobs", role="producer")["depth"]["pending"] == 1

    shown = run(taskforge, "task", created["id"], role="producer")
    assert shown.returncode == 0, shown.stderr
    assert ["id", created["id"]] in [line.split() for line in shown.stdout.splitlines()]
    assert '"user_id": "abc123"' in shown.stdout
    assert "AT" in shown.stdout and "pending" in shown.stdout  # the history table

    # A worker fails it with no retries left: dead, in the dead-letter queue.
    worker = taskforge.client("worker")
    [claimed] = worker.claim("cli-worker", "cli_jobs")
    worker.nack("cli-worker", claimed["id"], "boom", lease_token=claimed["lease_token"])
    [entry] = answer(taskforge, "dlq", "cli_jobs")
    assert entry["id"] == created["id"] and entry["last_error"] == "boom"
    table = run(taskforge, "dlq", "cli_jobs").stdout
    assert created["id"] in table and "boom" in table
    assert any(w["worker_id"] == "cli-worker" for w in answer(taskforge, "workers"))
    assert "cli-worker" in run(taskforge, "workers").stdout
    quieted = run(taskforge, "worker", "quiet", "cli-worker")
    assert quieted.returncode == 0, quieted.stderr
    assert quieted.stdout.startswith("worker cli-worker claims nothing more")
    assert answer(taskforge, "worker", "resume", "cli-worker")["worker_id"] == "cli-worker"
    assert run(taskforge, "worker", "quiet", "nobody").returncode == 1

    replayed = run(taskforge, "replay", "cli_jobs", created["id"])
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.strip() == "replayed 1 dead task of cli_jobs"
    assert taskforge.client().find_task(created["id"])["status"] == "pending"
    assert answer(taskforge, "replay", "cli_jobs", "--all") == {"replayed": 0}


def test_schedules_are_listed_with_their_next_run(taskforge: TaskForge):
    QueueFactory(name="cli_reports")
    admin = taskforge.client()
    assert run(taskforge, "schedules").stdout.strip() == "(none)"
    admin._request("POST", "/schedules", json={"name": "nightly", "queue": "cli_reports", "cron": "0 3 * * *"})
    admin._request("POST", "/schedules", json={"name": "often", "queue": "cli_reports", "every_seconds": 30})
    header, *rows = run(taskforge, "schedules").stdout.splitlines()
    assert header.split()[:4] == ["SCHEDULE", "QUEUE", "WHEN", "TIMEZONE"]
    assert [row.split()[:2] for row in rows] == [["nightly", "cli_reports"], ["often", "cli_reports"]]
    assert "0 3 * * *" in rows[0] and "every 30 s" in rows[1]
    [nightly, often] = answer(taskforge, "schedules")
    assert nightly["next_run_at"] and often["every_seconds"] == 30


def test_pause_and_resume(taskforge: TaskForge):
    QueueFactory(name="cli_paused")
    assert answer(taskforge, "pause", "cli_paused")["paused"] is True
    assert taskforge.client().stats("cli_paused")["paused"] is True
    done = run(taskforge, "resume", "cli_paused")
    assert (done.returncode, done.stdout.strip()) == (0, "resumed cli_paused")
    assert taskforge.client().stats("cli_paused")["paused"] is False


@pytest.mark.parametrize(
    ("args", "role", "code", "says"),
    [
        (("stats", "no_such_queue"), "admin", 1, "not_found"),
        (("task", "00000000-0000-0000-0000-000000000000"), "admin", 1, "not_found"),
        (("enqueue", "cli_codes", '{"a": 1}', "--priority", "11"), "producer", 1, "priority"),
        (("enqueue", "cli_codes", "[1, 2]"), "producer", 2, "JSON object"),
        (("enqueue", "cli_codes", "{not json"), "producer", 2, "not JSON"),
        (("replay", "cli_codes"), "admin", 2, "--all"),
        (("workers",), "producer", 4, "forbidden"),
    ],
)
def test_exit_codes_say_what_went_wrong(taskforge: TaskForge, args, role, code, says):
    QueueFactory(name="cli_codes")
    done = run(taskforge, *args, role=role)
    assert done.returncode == code, (done.stdout, done.stderr)
    assert says in done.stderr
    assert done.stdout == ""


def test_a_refused_key_and_an_unreachable_server(taskforge: TaskForge):
    refused = run(taskforge, "queues", key="tf_not_a_key")
    assert refused.returncode == 4 and "unauthorized" in refused.stderr
    missing = run(taskforge, "queues", key="")
    assert missing.returncode == 2 and "TASKFORGE_API_KEY" in missing.stderr
    away = run(taskforge, "--url", "http://127.0.0.1:9", "--timeout", "1", "stats", "q")
    assert away.returncode == 3 and "connection_error" in away.stderr
