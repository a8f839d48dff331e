"""Deprecated alias of ``taskforge_client.client`` and ``taskforge_client.errors``, kept for one release.

The Python client is its own distribution now, ``taskforge-client``
(``clients/python/``): import ``from taskforge_client import TaskForgeClient,
NotFound, ...``. This module only re-exports those names and goes away in the
next release.
"""

from taskforge_client.client import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    LONG_POLL_MARGIN_SECONDS,
    MAX_RETRY_AFTER_SECONDS,
    USER_AGENT,
    TaskForgeClient,
)
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
    error_from_response,
)

__all__ = [
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT",
    "LONG_POLL_MARGIN_SECONDS",
    "MAX_RETRY_AFTER_SECONDS",
    "USER_AGENT",
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "LeaseLost",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "ServerError",
    "TaskForgeClient",
    "TaskForgeError",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "ValidationError",
    "error_from_response",
]
