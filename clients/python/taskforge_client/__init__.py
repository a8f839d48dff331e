"""TaskForge's Python client: enqueue tasks, run a worker, plug Django's tasks framework in.

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
from taskforge_client.outcomes import Fail, Retry
from taskforge_client.worker.job import Job

__version__ = "0.2.0"

__all__ = [
    "Conflict",
    "ConnectionFailed",
    "Fail",
    "Forbidden",
    "Job",
    "LeaseLost",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "Retry",
    "ServerError",
    "TaskForgeClient",
    "TaskForgeError",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "ValidationError",
    "__version__",
]
