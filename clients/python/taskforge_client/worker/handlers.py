"""Which function runs a claimed task: the ``--handler``, or Django for a Django ``@task`` payload.

A handler is ``function(payload, job)`` named ``package.module:function``.
A worker started on an app module (``python -m taskforge_client.worker
myapp.tasks``) instead runs each task with the ``@app.task`` function its
``kind`` names.
The handler chosen on the command line always wins: a worker started with
``--handler`` hands it every payload, one holding ``DJANGO_TASK_KEY`` too,
so whoever can enqueue cannot make it run a function its operator did not
choose. Only a worker without ``--handler`` runs Django ``@task`` calls
(payloads enqueued through ``taskforge_client.django_tasks.TaskForgeBackend``),
in the project named by ``DJANGO_SETTINGS_MODULE``.

The Django integration is reached only through ``DJANGO_TASKS_EXECUTE``, a
module imported by name on first use: a plain worker never imports Django,
and the worker package never imports the integration (the integration
imports the worker's job record, so the dependency runs one way).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from taskforge_client.outcomes import Fail
from taskforge_client.worker.config import ConfigError
from taskforge_client.worker.job import Job

__all__ = [
    "DJANGO_TASKS_EXECUTE",
    "DJANGO_TASK_KEY",
    "Handler",
    "Handlers",
    "KindRunner",
    "load_handler",
    "prepare_django",
    "unknown_kind_error",
]

Handler = Callable[[dict[str, Any], Job], Mapping[str, Any] | None]

# A payload holding this key is a Django ``@task`` call: {"django_task": {"path", "args", "kwargs", ...}}.
DJANGO_TASK_KEY = "django_task"
# The module that runs those: ``run_job(job)`` and ``setup_django()``.
DJANGO_TASKS_EXECUTE = "taskforge_client.django_tasks.execute"


def load_handler(spec: str) -> Handler:
    """The function ``package.module:function`` names, or ``ConfigError`` saying what is wrong."""
    module_name, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--handler {spec!r}: cannot import {module_name!r} ({exc})") from exc
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError(f"--handler {spec!r}: {module_name!r} has no attribute {attribute!r}")
    if not callable(target):
        raise ConfigError(f"--handler {spec!r} is not callable")
    handler: Handler = target
    return handler


def prepare_django() -> None:
    """Load the project DJANGO_SETTINGS_MODULE names now, so a bad setting stops the worker at start."""
    importlib.import_module(DJANGO_TASKS_EXECUTE).setup_django()


class KindRunner(Protocol):
    """A task function registered with ``@app.task``: runs the call a job carries."""

    def run_job(self, job: Job) -> Mapping[str, Any] | None: ...


class Handlers:
    """Calls the right function for each job (from any pool thread).

    With ``tasks`` (a worker started on an app module), the task's ``kind``
    picks the function; a kind this worker does not know fails the task at
    once (``Fail``: nacked with ``retry: false``), since no attempt here could
    ever run it.
    """

    def __init__(self, handler: Handler | None, tasks: Mapping[str, KindRunner] | None = None) -> None:
        self.handler = handler
        self.tasks = tasks
        self._run_django_task: Callable[[Job], Any] | None = None

    def __call__(self, job: Job) -> Any:
        token = job.running()  # current_job() inside the task
        try:
            return self._call(job)
        finally:
            job.finished(token)

    def _call(self, job: Job) -> Any:
        if self.handler is not None:
            return self.handler(job.payload, job)
        if self.tasks is not None:
            runner = self.tasks.get(job.kind or "")
            if runner is None:
                raise Fail(unknown_kind_error(job.kind, self.tasks))
            return runner.run_job(job)
        if isinstance(job.payload.get(DJANGO_TASK_KEY), dict):
            if self._run_django_task is None:
                # Loaded on first use only: plain workers never import Django.
                self._run_django_task = importlib.import_module(DJANGO_TASKS_EXECUTE).run_job
            return self._run_django_task(job)
        raise LookupError("this worker has no --handler and the payload is not a Django task")


def unknown_kind_error(kind: str | None, tasks: Mapping[str, Any]) -> str:
    """The error of a task whose kind no registered function has: what came, what this worker runs."""
    known = sorted(tasks)
    shown = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
    what = f"unknown task kind {kind!r}" if kind else "task has no kind"
    return f"{what}: this worker runs {shown or 'no kinds'} (is the module that defines it imported by the worker?)"
