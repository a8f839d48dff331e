"""TaskForge's Python client: enqueue tasks, run a worker, plug Django's tasks framework in.

* ``TaskForge``: register plain functions as tasks (``@app.task``), enqueue
  them by kind and wait for their results (``taskforge_client.app``);
  ``taskforge_client.testing`` runs them in process in tests.
* ``TaskForgeClient``: the HTTP API's producer and worker calls
  (``taskforge_client.client``); error answers raise the ``TaskForgeError``
  family (``taskforge_client.errors``).
* ``Retry`` and ``Fail``: what a handler raises to steer its task
  (``taskforge_client.outcomes``); ``Job``: what a handler is given besides
  the payload.
* ``python -m taskforge_client.worker``: the reference worker
  (``taskforge_client.worker``).
* ``taskforge_client.django_tasks.TaskForgeBackend``: a backend for
  ``django.tasks`` (the only part that needs Django).

Needs the standard library and httpx only.
"""

from taskforge_client.app import TaskForge
from taskforge_client.client import TaskForgeClient
from taskforge_client.errors import (
    Conflict,
    ConnectionFailed,
    Forbidden,
    LeaseLost,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ServerError,
    TaskForgeError,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    ValidationError,
)
from taskforge_client.handles import ResultTimeout, TaskCancelled, TaskFailed, TaskHandle
from taskforge_client.outcomes import Fail, Retry
from taskforge_client.payloads import NotSerializable
from taskforge_client.tasks import TaskFunction
from taskforge_client.version import __version__
from taskforge_client.worker.job import Job, current_job

__all__ = [
    "Conflict",
    "ConnectionFailed",
    "Fail",
    "Forbidden",
    "Job",
    "LeaseLost",
    "MethodNotAllowed",
    "NotFound",
    "NotSerializable",
    "PayloadTooLarge",
    "ResultTimeout",
    "Retry",
    "ServerError",
    "TaskCancelled",
    "TaskFailed",
    "TaskForge",
    "TaskForgeClient",
    "TaskForgeError",
    "TaskFunction",
    "TaskHandle",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "ValidationError",
    "__version__",
    "current_job",
]
