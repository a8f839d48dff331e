"""An operator quiets, resumes and stops a running reference worker (real API, real worker process)."""

from __future__ import annotations

import time

import pytest

from queues.models import Status, Task
from tests.factories import QueueFactory
from tests.integration.workers.conftest import TaskForge, wait_for
from workers.models import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def held_by(worker_id: str) -> int:
    return Task.objects.filter(claimed_by=worker_id, status__in=[Status.CLAIMED, Status.EXECUTING]).count()


def statuses(queue: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in Task.objects.filter(queue__name=queue).values_list("status", flat=True):
        counts[status] = counts.get(status, 0) + 1
    return counts


def test_quiet_finishes_what_it_holds_and_claims_nothing_until_resumed(taskforge: TaskForge):
    QueueFactory(name="ctl_jobs")
    producer, admin = taskforge.client("producer"), taskforge.client("admin")
    producer.enqueue_batch("ctl_jobs", [{"payload": {"sleep_ms": 300, "n": n}} for n in range(30)])
    worker = taskforge.start_worker("--queue", "ctl_jobs", "--concurrency", "2", worker_id="ctl-quiet")
    wait_for(lambda: statuses("ctl_jobs").get("done", 0) >= 2, what="the worker at work")

    told = admin.control_worker("ctl-quiet", "quiet")
    assert told["control"] == "quiet"
    wait_for(lambda: held_by("ctl-quiet") == 0, 30, what="the quiet worker to finish what it held")
    quiet = statuses("ctl_jobs")
    assert quiet.get("pending", 0) > 0, quiet  # it stopped claiming with work left
    time.sleep(2)  # ten claim intervals: a worker that still claimed would have taken some
    assert statuses("ctl_jobs") == quiet
    assert worker.process.poll() is None  # quiet is not stop
    seen = Worker.objects.get(pk="ctl-quiet")  # what the workers page shows as host and version
    assert seen.address == "127.0.0.1" and seen.agent.startswith("taskforge-worker/0.")
    assert [line["control"] for line in worker.events("worker.control")] == ["quiet"]

    admin.control_worker("ctl-quiet", "resume")
    wait_for(lambda: statuses("ctl_jobs") == {"done": 30}, 60, what="every task done after the resume")
    assert [line["control"] for line in worker.events("worker.control")] == ["quiet", "resume"]
    assert worker.terminate() == 0


def test_stop_finishes_what_it_holds_then_exits_0(taskforge: TaskForge):
    QueueFactory(name="ctl_stop")
    producer, admin = taskforge.client("producer"), taskforge.client("admin")
    producer.enqueue_batch("ctl_stop", [{"payload": {"sleep_ms": 500, "n": n}} for n in range(20)])
    worker = taskforge.start_worker("--queue", "ctl_stop", "--concurrency", "2", worker_id="ctl-stop")
    wait_for(lambda: held_by("ctl-stop") > 0, what="the worker holding tasks")

    admin.control_worker("ctl-stop", "stop")
    assert worker.process.wait(60) == 0
    after = statuses("ctl_stop")
    # Everything it held was finished and acked, none handed back or left leased; the rest waits.
    assert set(after) == {"done", "pending"}, after
    assert Task.objects.filter(queue__name="ctl_stop", attempts__gt=1).count() == 0
    assert [line["control"] for line in worker.events("worker.control")] == ["stop"]
    [line] = worker.events("worker.stop")
    assert line["exit_code"] == 0
