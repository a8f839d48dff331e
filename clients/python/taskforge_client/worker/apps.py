"""The task functions a worker started on an app module runs: ``python -m taskforge_client.worker myapp.tasks``.

The module (``package.module``, or ``package.module:attribute`` naming a
``TaskForge`` app) is imported, which runs its ``@app.task`` decorators;
every ``TaskForge`` app among its attributes (or the one named) then lends
its task functions, by kind. Import the modules that define tasks from the
module you name if they are spread over several.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from taskforge_client.app import TaskForge
from taskforge_client.tasks import TaskFunction
from taskforge_client.worker.config import ConfigError

__all__ = ["AppTasks", "load_app"]


@dataclass(frozen=True)
class AppTasks:
    """What an app module registers: task functions by kind, and the queues they use (most urgent first)."""

    tasks: dict[str, TaskFunction[..., Any]]
    queues: list[str]


def load_app(spec: str) -> AppTasks:
    """The tasks of the app module ``spec`` names, or ``ConfigError`` saying what is wrong."""
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"app {spec!r}: cannot import {module_name!r} ({exc})") from exc
    if attribute:
        app = getattr(module, attribute, None)
        if not isinstance(app, TaskForge):
            raise ConfigError(f"app {spec!r}: {module_name!r} has no TaskForge app named {attribute!r}")
        apps = [app]
    else:
        found = vars(module).values()
        apps = _unique(
            [value for value in found if isinstance(value, TaskForge)]
            + [value.app for value in found if isinstance(value, TaskFunction)]
        )
    tasks: dict[str, TaskFunction[..., Any]] = {}
    queues: list[str] = []
    for app in apps:
        tasks.update(app.tasks)
        queues += [queue for queue in app.queues() if queue not in queues]
    if not tasks:
        raise ConfigError(
            f"app {spec!r}: no @app.task functions found (the module must hold the TaskForge app, "
            "and import every module that defines tasks)"
        )
    return AppTasks(tasks, queues)


def _unique(apps: Any) -> list[TaskForge]:
    seen: list[TaskForge] = []
    for app in apps:
        if all(app is not other for other in seen):
            seen.append(app)
    return seen
