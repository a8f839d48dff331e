"""Deprecated alias of ``taskforge_client.django_tasks``, kept for one release.

Settings that name ``"BACKEND": "workers.django_tasks.TaskForgeBackend"``
keep working; name ``taskforge_client.django_tasks.TaskForgeBackend``
instead (the ``taskforge-client`` distribution, ``clients/python/``). This
module only re-exports its names and goes away in the next release.
"""

from taskforge_client.django_tasks.backend import (
    RETURN_VALUE_KEY,
    TaskForgeBackend,
    TaskForgeFailure,
    taskforge_priority,
)
from taskforge_client.django_tasks.execute import run_job, setup_django

__all__ = ["RETURN_VALUE_KEY", "TaskForgeBackend", "TaskForgeFailure", "run_job", "setup_django", "taskforge_priority"]
