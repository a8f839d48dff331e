"""A backend for Django's tasks framework (``django.tasks``) that runs on TaskForge.

In the Django project that enqueues::

    TASKS = {
        "default": {
            "BACKEND": "taskforge_client.django_tasks.TaskForgeBackend",
            "OPTIONS": {"url": "http://taskforge:8080", "api_key": "<producer key>", "queue": "django"},
        }
    }

``my_task.enqueue(*args, **kwargs)`` then posts a TaskForge task whose payload
names the function and carries its arguments (``{"django_task": {"path",
"args", "kwargs", ...}}``). The reference worker, started without
``--handler`` and with ``DJANGO_SETTINGS_MODULE`` pointing at the same
project's settings, recognises such payloads and calls the function
(``taskforge_client.django_tasks.execute``). The return value is stored as the task's ``result``
(``{"return_value": ...}``), where ``get_result()`` reads it back.

Mapping onto TaskForge:

* queue: a task on Django's ``"default"`` queue goes to ``OPTIONS["queue"]``
  (default ``"default"``); any other ``queue_name`` is used as the TaskForge
  queue name. Queues must exist in TaskForge.
* priority: Django's -100..100 (higher runs first, 0 default) becomes
  TaskForge's 1..10 (lower runs first, 5 default), see ``taskforge_priority``.
* ``run_after`` becomes ``scheduled_at``; the result id is the TaskForge task id.
* inside a transaction the task is posted when it commits (nothing on a
  rollback), unless the TASKS entry sets ``"ENQUEUE_ON_COMMIT": False``;
  every enqueue carries its own idempotency key, so a retried post after a
  lost answer never makes a second task.
* ``get_result`` is one ``GET /tasks/{id}``, whatever the task's queue.
* status: ``pending``/``retry`` are READY, ``claimed``/``executing`` RUNNING,
  ``done`` SUCCESSFUL, ``dead``/``cancelled`` FAILED.

This package is the integration, so unlike the rest of the client it imports
Django (the ``django`` extra: ``pip install taskforge-client[django]``).
"""

from __future__ import annotations

import builtins
import math
import re
import threading
import uuid
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.tasks import DEFAULT_TASK_QUEUE_NAME, Task, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils.dateparse import parse_datetime
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from taskforge_client.client import TaskForgeClient
from taskforge_client.errors import NotFound
from taskforge_client.worker.handlers import DJANGO_TASK_KEY

__all__ = ["RETURN_VALUE_KEY", "TaskForgeBackend", "TaskForgeFailure", "load_task", "parse_when", "taskforge_priority"]

RETURN_VALUE_KEY = "return_value"

P = ParamSpec("P")
R = TypeVar("R")

_STATUS = {
    "pending": TaskResultStatus.READY,
    "retry": TaskResultStatus.READY,
    "claimed": TaskResultStatus.RUNNING,
    "executing": TaskResultStatus.RUNNING,
    "done": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}
_FAILED_ATTEMPT = frozenset({"retry", "dead"})
_EXCEPTION_HEAD = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


class TaskForgeFailure(Exception):
    """Stands for a failure no exception of the task caused (lease expiry, shutdown, cancel)."""


def taskforge_priority(django_priority: int) -> int:
    """Django -100..100 (higher first, default 0) to TaskForge 1..10 (lower first, default 5).

    0 stays the default 5; 1..25 -> 4, 26..50 -> 3, 51..75 -> 2, 76..100 -> 1;
    -1..-20 -> 6, -21..-40 -> 7, -41..-60 -> 8, -61..-80 -> 9, -81..-100 -> 10.
    """
    if django_priority >= 0:
        return 5 - math.ceil(django_priority / 25)
    return 5 + math.ceil(-django_priority / 20)


class TaskForgeBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Inside a transaction, post only once it commits (the TASKS entry's ENQUEUE_ON_COMMIT, default True).
        self.enqueue_on_commit = bool(params.get("ENQUEUE_ON_COMMIT", True))
        self.url: str = self.options.get("url", "")
        self.api_key: str = self.options.get("api_key", "")
        self.default_queue: str = self.options.get("queue", DEFAULT_TASK_QUEUE_NAME)
        self.timeout: float = float(self.options.get("timeout", 15))
        self._client: TaskForgeClient | None = None
        self._client_lock = threading.Lock()

    @property
    def client(self) -> TaskForgeClient:
        with self._client_lock:
            if self._client is None:
                if not (self.url and self.api_key):
                    raise ImproperlyConfigured(f"TASKS[{self.alias!r}]['OPTIONS'] needs 'url' and 'api_key'")
                self._client = TaskForgeClient(self.url, self.api_key, timeout=self.timeout)
            return self._client

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        missing = [name for name in ("url", "api_key") if not self.options.get(name)]
        if missing:
            return [
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS'] is missing {', '.join(missing)}",
                    hint="Give the TaskForge API URL and a producer API key.",
                    id="taskforge.E001",
                )
            ]
        return []

    def taskforge_queue(self, queue_name: str) -> str:
        return self.default_queue if queue_name == DEFAULT_TASK_QUEUE_NAME else queue_name

    # -- producer side

    def enqueue(self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]) -> TaskResult[P, R]:
        """Post the task; inside a transaction (with ``ENQUEUE_ON_COMMIT``), once it commits.

        Each enqueue gets its own idempotency key, so the client may send it
        again after a lost answer or a 503 and the server still makes one task.
        A deferred enqueue returns at once a READY result whose ``id`` is a
        placeholder (``django-<uuid>``) until the commit gives it the TaskForge
        task id; a rollback sends nothing.
        """
        self.validate_task(task)
        spec = {
            "path": task.module_path,
            "args": normalize_json(list(args)),
            "kwargs": normalize_json(dict(kwargs)),
            "priority": task.priority,
            "queue_name": task.queue_name,
            "backend": self.alias,
        }
        key = f"django-{uuid.uuid4()}"
        if self.enqueue_on_commit and transaction.get_connection().in_atomic_block:
            waiting = self._waiting_result(task, spec, key)

            def send_on_commit() -> None:
                self._send(task, spec, key, waiting)

            transaction.on_commit(send_on_commit)
            return waiting
        return self._send(task, spec, key, None)

    def _send(
        self, task: Task[P, R], spec: dict[str, Any], key: str, waiting: TaskResult[P, R] | None
    ) -> TaskResult[P, R]:
        created = self.client.enqueue(
            self.taskforge_queue(task.queue_name),
            {DJANGO_TASK_KEY: spec},
            priority=taskforge_priority(task.priority),
            scheduled_at=task.run_after,
            idempotency_key=key,
        )
        result = self._result(created, task)
        if waiting is not None:
            # The caller holds the result handed out before the commit: it now names the real task.
            for name in ("id", "status", "enqueued_at"):
                object.__setattr__(waiting, name, getattr(result, name))
            result = waiting
        task_enqueued.send(type(self), task_result=result)
        return result

    def _waiting_result(self, task: Task[P, R], spec: dict[str, Any], key: str) -> TaskResult[P, R]:
        return TaskResult(
            task=task,
            id=key,
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=spec["args"],
            kwargs=spec["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The task, read in one request whatever its queue (``GET /tasks/{id}``)."""
        try:
            uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        try:
            data = self.client.find_task(result_id)
        except NotFound:
            raise TaskResultDoesNotExist(result_id) from None
        spec = (data.get("payload") or {}).get(DJANGO_TASK_KEY)
        if not isinstance(spec, dict):
            raise TaskResultDoesNotExist(result_id)  # a TaskForge task, but not one of Django's
        task = load_task(spec["path"]).using(
            priority=spec.get("priority"), queue_name=spec.get("queue_name"), backend=self.alias
        )
        return self._result(data, task)

    def _result(self, data: dict[str, Any], task: Task[P, R]) -> TaskResult[P, R]:
        spec = data["payload"][DJANGO_TASK_KEY]
        history = data.get("history") or []
        claims = [entry for entry in history if entry["to_status"] == "claimed"]
        status = _STATUS.get(data["status"], TaskResultStatus.READY)
        finished_at = parse_when(data.get("finished_at"))
        if finished_at is None and status == TaskResultStatus.FAILED and history:
            finished_at = parse_when(history[-1]["at"])
        result: TaskResult[P, R] = TaskResult(
            task=task,
            id=str(data["id"]),
            status=status,
            enqueued_at=parse_when(data.get("created_at")),
            started_at=parse_when(claims[0]["at"]) if claims else None,
            last_attempted_at=parse_when(claims[-1]["at"]) if claims else parse_when(data.get("claimed_at")),
            finished_at=finished_at,
            args=spec.get("args", []),
            kwargs=spec.get("kwargs", {}),
            backend=self.alias,
            errors=[
                _error(entry["detail"])
                for entry in history
                if entry["to_status"] in _FAILED_ATTEMPT and entry.get("detail")
            ],
            worker_ids=[entry["worker_id"] for entry in claims if entry.get("worker_id")],
        )
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", (data.get("result") or {}).get(RETURN_VALUE_KEY))
        return result


def parse_when(value: str | None) -> datetime | None:
    return parse_datetime(value) if value else None


def _error(detail: str) -> TaskError:
    """A TaskForge error text (``Type: message`` then the traceback) as Django's TaskError."""
    match = _EXCEPTION_HEAD.match(detail)
    path = match.group(1) if match else ""
    if path and "." not in path:
        builtin = getattr(builtins, path, None)
        path = f"builtins.{path}" if isinstance(builtin, type) and issubclass(builtin, BaseException) else ""
    if not path:
        path = f"{TaskForgeFailure.__module__}.{TaskForgeFailure.__qualname__}"
    return TaskError(exception_class_path=path, traceback=detail)


def load_task(path: str) -> Task[..., Any]:
    task = import_string(path)
    if not isinstance(task, Task):
        raise TypeError(f"{path} is not a Django task (decorate it with @django.tasks.task)")
    return task
