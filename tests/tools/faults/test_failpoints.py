"""Failpoints make "crashed between the commit and the response" repeatable."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from queues import lifecycle
from queues.apikeys import create_key
from queues.models import Status, Task
from tests.factories import QueueFactory, TaskFactory
from tests.live import ROOT


def test_settings_refuse_a_bad_failpoint_at_start():
    env = {
        **os.environ,
        "TASKFORGE_FAILPOINTS": "claim.after_comit=kill",
        "DJANGO_SETTINGS_MODULE": "taskforge.settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "TASKFORGE_FAILPOINTS" in done.stderr


@pytest.mark.django_db
def test_enqueue_that_fails_after_commit_is_kept_and_a_retry_with_its_key_finds_it(settings, queue, producer):
    settings.TASKFORGE_FAILPOINTS = "enqueue.after_commit=1*raise"
    body = {"payload": {"n": 1}, "idempotency_key": "k-1"}
    first = producer.post("/queues/email_jobs/tasks", body, format="json")
    assert first.status_code == 500
    assert first.json()["error"]["code"] == "internal_error"
    # The producer saw an error, but the task was committed: retrying with the
    # same key returns it instead of creating a second one.
    again = producer.post("/queues/email_jobs/tasks", body, format="json")
    assert again.status_code == 200
    assert Task.objects.filter(queue=queue).count() == 1
    assert again.json()["id"] == str(Task.objects.get(queue=queue).id)


@pytest.mark.django_db
def test_ack_that_fails_after_commit_is_done_and_a_repeated_ack_is_answered_200(settings, queue, worker):
    task = TaskFactory(queue=queue)
    (claimed,) = lifecycle.claim("w-1", [queue.id], 1)
    settings.TASKFORGE_FAILPOINTS = "ack.after_commit=1*raise"
    body = {"worker_id": "w-1", "task_id": str(task.id), "lease_token": claimed["lease_token"]}
    assert worker.post("/workers/ack", body, format="json").status_code == 500
    task.refresh_from_db()
    assert task.status == Status.DONE
    assert worker.post("/workers/ack", body, format="json").status_code == 200


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_api_process_killed_after_claim_commit_loses_no_task(live_stack):
    """SIGKILL between the claim's commit and its response: the worker gets no
    answer, the task stays leased to it, and lease expiry hands it back."""
    queue = QueueFactory(name="fp")
    _, key = create_key("fp-worker", "admin")
    task = TaskFactory(queue=queue)
    url = live_stack.start_api(
        extra_env={"TASKFORGE_FAILPOINTS": "claim.after_commit=1*kill", "TASKFORGE_HEARTBEAT_TIMEOUT": "1"}
    )
    headers = {"Authorization": f"Bearer {key}"}
    with pytest.raises(httpx.HTTPError):
        httpx.post(f"{url}/workers/claim", json={"worker_id": "w-1", "queue": "fp"}, headers=headers, timeout=10)
    task.refresh_from_db()
    assert (task.status, task.claimed_by, task.attempts) == (Status.CLAIMED, "w-1", 1)
    time.sleep(1.2)
    assert lifecycle.expire_leases() == 1
    task.refresh_from_db()
    assert task.status == Status.RETRY
    # gunicorn replaced the killed worker process; the API still serves.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    assert httpx.get(f"{url}/healthz", timeout=2).status_code == 200
