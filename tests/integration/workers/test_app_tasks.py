"""``@app.task`` functions end to end: enqueue by kind, a worker started on the app module, results.

A live API (real Postgres and Redis) and a real worker process, started with
Django imports refused. The decisions these rely on (argument checks, claim
queues, progress and cancel flags) are unit-tested in
tests/unit/client/test_tasks.py and tests/unit/client/test_worker_kinds.py.
"""

from __future__ import annotations

import pytest

from taskforge_client import ResultTimeout, TaskCancelled, TaskFailed
from tests.factories import QueueFactory
from tests.integration.workers import app_tasks
from tests.integration.workers.conftest import wait_for

APP_MODULE = "tests.integration.workers.app_tasks"


@pytest.fixture
def forge(taskforge):
    QueueFactory(name="app_math", retry_base_ms=100, retry_max_delay_ms=200)
    QueueFactory(name="app_slow")
    QueueFactory(name="other")
    app_tasks.configure(taskforge.url, taskforge.keys["producer"])
    yield taskforge
    app_tasks.app.close()


def start_app_worker(forge, worker_id: str = "w-app"):
    return forge.start_worker(APP_MODULE, "--concurrency", "2", worker_id=worker_id, handler=None)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_tasks_run_by_kind_on_a_worker_started_on_the_app_module(forge):
    handle = app_tasks.add.enqueue(2, 3)
    stored = forge.client("producer").get_task("app_math", handle.id)
    assert stored["kind"] == "math.add" and stored["priority"] == 3
    assert stored["payload"] == {"args": [2, 3], "kwargs": {}}
    with pytest.raises(ResultTimeout):
        handle.result(timeout=1)  # no worker yet

    worker = start_app_worker(forge)
    assert handle.result(timeout=30) == 5
    assert handle.task["result"] == {"return_value": 5}
    start = worker.events("worker.start")[0]
    assert start["queues"] == ["app_math", "app_slow"] and "math.add" in start["kinds"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_unknown_kind_is_dead_at_once_and_other_queues_are_left_alone(forge):
    producer = forge.client("producer")
    unknown = producer.enqueue("app_math", {"args": [], "kwargs": {}}, kind="math.divide", max_retries=3)
    foreign = producer.enqueue("other", {"anything": True}, kind="billing.charge")
    start_app_worker(forge)
    dead = wait_for(lambda: (t := producer.get_task("app_math", unknown["id"]))["status"] == "dead" and t, 30)
    assert dead["attempts"] == 1  # no retry could ever run it
    assert dead["last_error"].startswith("unknown task kind 'math.divide': this worker runs math.add, ")
    assert producer.get_task("other", foreign["id"])["status"] == "pending"  # not this app's queue


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.loops("run_scheduler")  # promotes the retry
def test_result_raises_task_failed_for_a_dead_task(forge):
    handle = app_tasks.explode.enqueue("kaboom")
    start_app_worker(forge)
    with pytest.raises(TaskFailed, match="ValueError: kaboom") as failed:
        handle.result(timeout=30)
    assert failed.value.task["attempts"] == 2  # max_retries=1 from the decorator


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_progress_is_visible_and_a_cancel_stops_the_running_task(forge):
    handle = app_tasks.count.enqueue(200)  # 40 s unless stopped
    start_app_worker(forge)

    def progressed():
        task = handle.refresh()
        return task["status"] == "executing" and (task.get("progress") or {}).get("step", 0) >= 2 and task

    running = wait_for(progressed, 30, what="progress reported by a heartbeat")
    assert running["progress"]["of"] == 200
    answer = handle.cancel()
    assert answer["cancel_requested"] is True and answer["status"] in ("claimed", "executing")
    with pytest.raises(TaskCancelled):
        handle.result(timeout=20)  # the next heartbeat says so; the handler stops and is nacked
    assert handle.task["attempts"] == 1
    assert handle.task["progress"]["step"] < 200
