"""Django's tasks framework on TaskForge: a project's @task functions are enqueued
through ``TaskForgeBackend`` and run by the reference worker (no ``--handler``)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import TaskResultDoesNotExist
from django.test import override_settings
from django.utils import timezone

from taskforge_client.django_tasks import taskforge_priority
from tests.factories import QueueFactory
from tests.integration.workers.conftest import wait_for

PROJECT_SETTINGS = "tests.integration.workers.djangoproject.settings"


def tasks_setting(url: str = "", api_key: str = "") -> dict:
    return {
        "default": {
            "BACKEND": "taskforge_client.django_tasks.TaskForgeBackend",
            "QUEUES": ["default", "reports"],
            "OPTIONS": {"url": url, "api_key": api_key, "queue": "django"},
        }
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.loops("run_scheduler")
def test_django_tasks_run_on_the_reference_worker_and_results_are_readable(taskforge):
    QueueFactory(name="django", max_retries=1, retry_base_ms=100, retry_max_delay_ms=200)
    QueueFactory(name="reports")
    producer = taskforge.client("producer")
    with override_settings(TASKS=tasks_setting(taskforge.url, taskforge.keys["producer"])):
        # Imported here: @task checks its queue against the backend configured at import time.
        from tests.integration.workers.djangoproject import tasks

        added = tasks.add.enqueue(2, 3)
        assert added.status == TaskResultStatus.READY
        assert added.enqueued_at is not None
        run_at = timezone.now() + timedelta(seconds=2)
        report = tasks.report.using(run_after=run_at).enqueue("march", rows=[1, 2, 3])
        lucky = tasks.second_time_lucky.enqueue()
        broken = tasks.always_fails.enqueue()

        # What TaskForge stored: the queue, priority and due time Django asked for.
        stored = producer.get_task("reports", report.id)
        assert stored["priority"] == taskforge_priority(60) == 2
        assert stored["payload"]["django_task"]["path"] == "tests.integration.workers.djangoproject.tasks.report"
        assert abs((datetime.fromisoformat(stored["scheduled_at"]) - run_at).total_seconds()) < 0.01
        assert producer.get_task("django", added.id)["priority"] == 5

        worker = taskforge.start_worker(
            "--concurrency", "2", worker_id="w-django", handler=None, django=True,
            env={"DJANGO_SETTINGS_MODULE": PROJECT_SETTINGS},
        )  # fmt: skip
        for result in (added, report, lucky, broken):
            wait_for(lambda r=result: (r.refresh(), r.is_finished)[1], what=f"{result.task.name} finished")

        assert added.status == TaskResultStatus.SUCCESSFUL
        assert added.return_value == 5
        assert added.worker_ids == ["w-django"]
        assert added.started_at is not None and added.finished_at >= added.started_at
        fetched = tasks.report.get_result(report.id)
        assert fetched.return_value == {"name": "march", "total": 6}
        assert (fetched.args, fetched.kwargs) == (["march"], {"rows": [1, 2, 3]})
        assert fetched.started_at >= run_at
        # takes_context: the second attempt sees context.attempt == 2; the first one's error is kept.
        assert lucky.status == TaskResultStatus.SUCCESSFUL
        assert lucky.return_value == 2
        assert [e.exception_class for e in lucky.errors] == [ValueError]
        assert "first attempt fails" in lucky.errors[0].traceback
        assert lucky.attempts == 2
        # Out of attempts: FAILED, with both errors, and no return value.
        assert broken.status == TaskResultStatus.FAILED
        assert [e.exception_class for e in broken.errors] == [KeyError, KeyError]
        with pytest.raises(ValueError, match="Task failed"):
            _ = broken.return_value
        assert not worker.events("task.dropped")

        with pytest.raises(TaskResultDoesNotExist):
            task_backends["default"].get_result("00000000-0000-0000-0000-000000000000")
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["default"].get_result("not-a-uuid")


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_worker_without_handler_or_settings_fails_tasks_it_cannot_run(taskforge):
    QueueFactory(name="plain", max_retries=0)
    created = taskforge.client("producer").enqueue("plain", {"anything": 1})
    worker = taskforge.start_worker("--queue", "plain", worker_id="w-bare", handler=None)
    assert worker.events("worker.no_handler") or wait_for(lambda: worker.events("worker.no_handler"))
    wait_for(lambda: taskforge.client("producer").get_task("plain", created["id"])["status"] == "dead")
    error = taskforge.client("producer").get_task("plain", created["id"])["last_error"]
    assert error.startswith("LookupError: this worker has no --handler and the payload is not a Django task")
