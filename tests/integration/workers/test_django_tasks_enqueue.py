"""How the Django tasks backend posts and reads tasks: on commit, exactly once, in one read.

A live API (real Postgres and Redis); the backend's client gets a transport
that records every request it sends to that API and can lose one answer
after the server has handled the request, as a dropped connection would.
Running the tasks on the worker is tests/integration/workers/test_django_tasks.py.
"""

from __future__ import annotations

import httpx
import pytest
from django.db import transaction
from django.tasks import TaskResultStatus, task_backends
from django.test import override_settings

from queues.models import Task
from taskforge_client import TaskForgeClient
from tests.factories import QueueFactory
from tests.integration.workers.test_django_tasks import tasks_setting


class RecordingTransport(httpx.BaseTransport):
    """Sends each request to the live API and records it; ``lose_next_answer`` drops one answer."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.sent: list[str] = []
        self.lose_next_answer = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(f"{request.method} {request.url.path}")
        response = self.inner.handle_request(request)
        if self.lose_next_answer:
            self.lose_next_answer = False
            response.read()
            response.close()
            raise httpx.ReadError("connection dropped before the answer arrived", request=request)
        return response


@pytest.fixture
def backend(taskforge):
    """The project's TaskForge backend, its requests recorded; yields (backend, transport, tasks module)."""
    QueueFactory(name="django")
    QueueFactory(name="reports")
    setting = tasks_setting(taskforge.url, taskforge.keys["producer"])
    with override_settings(TASKS=setting):
        from tests.integration.workers.djangoproject import tasks

        transport = RecordingTransport()
        chosen = task_backends["default"]
        chosen._client = TaskForgeClient(
            taskforge.url, taskforge.keys["producer"], transport=transport, backoff_seconds=0.01
        )
        yield chosen, transport, tasks
        chosen._client.close()


def stored(queue: str) -> list[Task]:
    return list(Task.objects.filter(queue__name=queue))


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_inside_a_transaction_the_task_is_posted_on_commit_and_never_on_rollback(backend):
    chosen, transport, tasks = backend
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = tasks.add.enqueue(1, 2)
        assert rolled_back.status == TaskResultStatus.READY
        assert rolled_back.id.startswith("django-")  # no TaskForge task yet
        raise RuntimeError("roll back")
    assert transport.sent == [] and stored("django") == []

    with transaction.atomic():
        committed = tasks.add.enqueue(3, 4)
        assert transport.sent == []  # a worker must not see it before the rows it needs exist
    assert transport.sent == ["POST /queues/django/tasks"]
    (task,) = stored("django")
    assert committed.id == str(task.id)  # the result handed out earlier now names the real task
    assert task.payload["django_task"]["args"] == [3, 4]
    assert chosen.get_result(committed.id).args == [3, 4]


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_enqueue_on_commit_can_be_turned_off(taskforge):
    QueueFactory(name="django")
    setting = tasks_setting(taskforge.url, taskforge.keys["producer"])
    setting["default"]["ENQUEUE_ON_COMMIT"] = False
    with override_settings(TASKS=setting):
        from tests.integration.workers.djangoproject import tasks

        with transaction.atomic():
            result = tasks.add.enqueue(5, 6)
            assert [str(task.id) for task in stored("django")] == [result.id]
        task_backends["default"].client.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_an_enqueue_sent_again_after_a_lost_answer_makes_one_task(backend):
    _, transport, tasks = backend
    transport.lose_next_answer = True
    result = tasks.add.enqueue(7, 8)
    assert transport.sent == ["POST /queues/django/tasks", "POST /queues/django/tasks"]
    (task,) = stored("django")  # the first post created it; the second got it back
    assert result.id == str(task.id)
    assert task.idempotency_key.startswith("django-")


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_get_result_is_one_request_whatever_the_queue(backend):
    chosen, transport, tasks = backend
    report = tasks.report.enqueue("march", rows=[1, 2])  # the "reports" queue, not the backend's default
    transport.sent.clear()
    fetched = chosen.get_result(report.id)
    assert transport.sent == [f"GET /tasks/{report.id}"]
    assert (fetched.args, fetched.kwargs, fetched.status) == (["march"], {"rows": [1, 2]}, TaskResultStatus.READY)
