"""Runs, inside the worker, the Django ``@task`` a TaskForge payload names.

The reference worker imports this module by name the first time it claims a
payload holding ``django_task`` without a ``--handler`` (``taskforge_client.worker.handlers``), and at
start when it has no ``--handler`` but a ``DJANGO_SETTINGS_MODULE``. The task
runs as Django's own backends run it: ``task_started`` and ``task_finished``
are sent, a ``takes_context`` task gets its ``TaskContext`` (``attempt`` counts
TaskForge attempts), and its return value becomes the ack's result,
``{"return_value": ...}``.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.tasks import TaskContext, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from taskforge_client.django_tasks.backend import RETURN_VALUE_KEY, TaskForgeBackend, load_task, parse_when
from taskforge_client.worker.handlers import DJANGO_TASK_KEY
from taskforge_client.worker.job import Job
from taskforge_client.worker.logs import LOGGER_NAME
from taskforge_client.worker.outcome import describe_exception

__all__ = ["run_job", "setup_django"]

_setup_lock = threading.Lock()


def setup_django() -> None:
    """Load the project named by DJANGO_SETTINGS_MODULE (once per process)."""
    import django
    from django.apps import apps
    from django.conf import settings

    with _setup_lock:
        if apps.ready:
            return
        if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
            raise ImproperlyConfigured(
                "this payload is a Django task: start the worker with DJANGO_SETTINGS_MODULE set to "
                "the settings of the project that defines it"
            )
        django.setup()
        # A project LOGGING dict may disable existing loggers; the worker's own lines must survive.
        logging.getLogger(LOGGER_NAME).disabled = False


def run_job(job: Job) -> dict[str, Any]:
    """Run the Django task a TaskForge payload names; its return value becomes the ack's result."""
    from django.db import close_old_connections

    setup_django()
    spec = job.payload[DJANGO_TASK_KEY]
    task = load_task(spec["path"])
    now = timezone.now()
    task_result: TaskResult[..., Any] = TaskResult(
        task=task,
        id=job.id,
        status=TaskResultStatus.RUNNING,
        enqueued_at=parse_when(job.task.get("created_at")),
        started_at=now,
        last_attempted_at=now,
        finished_at=None,
        args=spec.get("args", []),
        kwargs=spec.get("kwargs", {}),
        backend=spec.get("backend", task.backend),
        errors=[],
        # TaskContext.attempt is len(worker_ids): one entry per TaskForge attempt.
        worker_ids=[job.worker_id] * max(1, job.attempts),
    )
    task_started.send(sender=TaskForgeBackend, task_result=task_result)
    # Like a request: no connection outlives its usefulness between tasks.
    close_old_connections()
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=task_result), *task_result.args, **task_result.kwargs)
        else:
            value = task.call(*task_result.args, **task_result.kwargs)
        value = normalize_json(value)
    except BaseException as exc:
        object.__setattr__(task_result, "finished_at", timezone.now())
        object.__setattr__(task_result, "status", TaskResultStatus.FAILED)
        path = f"{type(exc).__module__}.{type(exc).__qualname__}"
        task_result.errors.append(TaskError(exception_class_path=path, traceback=describe_exception(exc)))
        task_finished.send(sender=TaskForgeBackend, task_result=task_result)
        raise
    finally:
        close_old_connections()
    object.__setattr__(task_result, "finished_at", timezone.now())
    object.__setattr__(task_result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(task_result, "_return_value", value)
    task_finished.send(sender=TaskForgeBackend, task_result=task_result)
    return {RETURN_VALUE_KEY: value}
