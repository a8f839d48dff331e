"""The exceptions an error answer from TaskForge becomes, one per contract error code.

Every class is a ``TaskForgeError`` carrying ``.code``, ``.status``,
``.message`` and ``.fields``, so a caller catches the family or one member
(``LeaseLost``, ``NotFound``...) as it needs.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = [
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "LeaseLost",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "ServerError",
    "TaskForgeError",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "ValidationError",
    "error_from_response",
]


class TaskForgeError(Exception):
    """An error answer from TaskForge (or no answer at all, see ``ConnectionFailed``)."""

    default_code = "error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        fields: dict[str, list[str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.status = status
        self.fields = fields or {}

    def __str__(self) -> str:
        where = f"{self.status} " if self.status else ""
        return f"{where}{self.code}: {self.message}"


class ValidationError(TaskForgeError):
    default_code = "validation_error"


class Unauthorized(TaskForgeError):
    default_code = "unauthorized"


class Forbidden(TaskForgeError):
    default_code = "forbidden"


class NotFound(TaskForgeError):
    default_code = "not_found"


class MethodNotAllowed(TaskForgeError):
    default_code = "method_not_allowed"


class Conflict(TaskForgeError):
    """409 ``conflict``: an idempotency key reused with another body, a queue not empty..."""

    default_code = "conflict"


class LeaseLost(TaskForgeError):
    """409 ``lease_lost``: this worker no longer holds the task; stop working on it, never ack it."""

    default_code = "lease_lost"


class PayloadTooLarge(TaskForgeError):
    default_code = "payload_too_large"


class UnsupportedMediaType(TaskForgeError):
    default_code = "unsupported_media_type"


class Unavailable(TaskForgeError):
    """503: TaskForge (or its Postgres/Redis) cannot serve right now; try again later."""

    default_code = "unavailable"


class ConnectionFailed(Unavailable):
    """No HTTP answer at all: refused, reset, timed out. ``status`` is None."""

    default_code = "connection_error"


class ServerError(TaskForgeError):
    default_code = "internal_error"


_BY_CODE: dict[str, type[TaskForgeError]] = {
    cls.default_code: cls
    for cls in (
        ValidationError,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        Conflict,
        LeaseLost,
        PayloadTooLarge,
        UnsupportedMediaType,
        Unavailable,
        ServerError,
    )
}
# For answers without our error body (a proxy's 502 page, say).
_BY_STATUS: dict[int, type[TaskForgeError]] = {
    400: ValidationError,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


class ErrorAnswer(Protocol):
    """What an error answer must offer: httpx's ``Response`` does, and the client's own ``Answer``."""

    @property
    def status_code(self) -> int: ...

    @property
    def reason_phrase(self) -> str: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


def error_from_response(response: ErrorAnswer) -> TaskForgeError:
    """The exception for an error answer, chosen by the body's code, else by the status."""
    fields: dict[str, list[str]] | None
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
        fields = error.get("fields") or None
    except (ValueError, KeyError, TypeError):
        code, message, fields = "", response.text[:500] or response.reason_phrase, None
    cls = _BY_CODE.get(code) or _BY_STATUS.get(response.status_code)
    if cls is None:
        cls = ServerError if response.status_code >= 500 else TaskForgeError
    return cls(message, code=code or None, status=response.status_code, fields=fields)
