"""A Python client for the TaskForge HTTP API (producer and worker calls).

Needs only the standard library and httpx: it never imports Django, so any
Python service can enqueue tasks or run a worker with it.

* One ``httpx.Client`` per ``TaskForgeClient``: connections are kept alive and
  reused, and the client is safe to share between threads.
* Retries (connection errors and 503, with exponential backoff and jitter)
  happen only where repeating the request cannot do harm: ``claim``,
  ``heartbeat``, reads, and enqueues that carry an ``idempotency_key``. A
  repeated ack or nack is left to the caller, who knows whether the lease
  still matters.
* Every error answer becomes an exception named after the contract's error
  code (``LeaseLost``, ``NotFound``, ``ValidationError``...), all subclasses of
  ``TaskForgeError`` with ``.code``, ``.status`` and ``.fields``.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import httpx

__all__ = [
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
]

DEFAULT_TIMEOUT = 15.0
DEFAULT_RETRIES = 3
# A long poll is answered after wait_seconds: the read must be allowed longer.
LONG_POLL_MARGIN_SECONDS = 5.0
MAX_RETRY_AFTER_SECONDS = 30.0
USER_AGENT = "taskforge-python-client/1.0"

Json = dict[str, Any]
TaskId = str | uuid.UUID


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


def error_from_response(response: httpx.Response) -> TaskForgeError:
    """The exception for an error answer, chosen by the body's code, else by the status."""
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


def _timestamp(value: datetime | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        # TaskForge refuses naive timestamps; say so before the round trip.
        raise ValueError("scheduled_at must be timezone-aware (naive datetimes are ambiguous)")
    return value.isoformat()


def _enqueue_body(
    payload: Mapping[str, Any],
    *,
    priority: int | None = None,
    scheduled_at: datetime | str | None = None,
    idempotency_key: str | None = None,
    max_retries: int | None = None,
) -> Json:
    body: Json = {"payload": dict(payload)}
    optional = {
        "priority": priority,
        "scheduled_at": _timestamp(scheduled_at),
        "idempotency_key": idempotency_key,
        "max_retries": max_retries,
    }
    body.update({name: value for name, value in optional.items() if value is not None})
    return body


class TaskForgeClient:
    """Talks to one TaskForge API. Thread-safe; use it as a context manager or call ``close()``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        retries: int = DEFAULT_RETRIES,
        backoff_seconds: float = 0.25,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not api_key:
            raise ValueError("an API key is required")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.retries = max(0, int(retries))
        self.backoff_seconds = backoff_seconds
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(self.timeout),
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT, "Accept": "application/json"},
            transport=transport,
        )

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TaskForgeClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- producer calls ----------------------------------------------------

    def enqueue(
        self,
        queue: str,
        payload: Mapping[str, Any],
        *,
        priority: int | None = None,
        scheduled_at: datetime | str | None = None,
        idempotency_key: str | None = None,
        max_retries: int | None = None,
    ) -> Json:
        """Add one task; returns the task. Retried on failure only with an ``idempotency_key``."""
        body = _enqueue_body(
            payload,
            priority=priority,
            scheduled_at=scheduled_at,
            idempotency_key=idempotency_key,
            max_retries=max_retries,
        )
        return self._request("POST", f"/queues/{queue}/tasks", json=body, retry=idempotency_key is not None)

    def enqueue_batch(self, queue: str, tasks: Iterable[Mapping[str, Any]]) -> list[Json]:
        """Add 1-1000 tasks at once, all or nothing. Each item is an enqueue body
        (``{"payload": ..., "priority": ...}``); retried only when every item has an idempotency key."""
        items = []
        for item in tasks:
            fields = dict(item)
            payload = fields.pop("payload")
            items.append(_enqueue_body(payload, **fields))
        retry = bool(items) and all("idempotency_key" in item for item in items)
        answer = self._request("POST", f"/queues/{queue}/tasks/batch", json={"tasks": items}, retry=retry)
        return answer["tasks"]

    def get_task(self, queue: str, task_id: TaskId) -> Json:
        """One task with its ``history`` of transitions."""
        return self._request("GET", f"/queues/{queue}/tasks/{task_id}", retry=True)

    def cancel(self, queue: str, task_id: TaskId) -> Json:
        """Cancel a pending or retry task (``Conflict`` otherwise)."""
        return self._request("DELETE", f"/queues/{queue}/tasks/{task_id}")

    def stats(self, queue: str) -> Json:
        return self._request("GET", f"/queues/{queue}/stats", retry=True)

    def dead_letters(self, queue: str) -> list[Json]:
        """The queue's dead-letter entries, newest death first (admin key; first page)."""
        return self._request("GET", f"/queues/{queue}/dlq", retry=True)["results"]

    def create_queue(self, name: str, **settings: Any) -> Json:
        """Create a queue (admin key): ``max_retries``, ``rate_limit``, ``retry_base_ms``..."""
        return self._request("POST", "/queues", json={"name": name, **settings})

    # -- worker calls ------------------------------------------------------

    def claim(
        self, worker_id: str, queue: str | None = None, *, max_tasks: int = 1, wait_seconds: int = 0
    ) -> list[Json]:
        """Claim up to ``max_tasks`` tasks, long-polling up to ``wait_seconds``.

        Each task carries ``lease_token`` and ``lease_expires_at``. If an answer
        is lost and the call retried, the tasks of the lost answer stay leased
        to this worker until their lease expires, then run again.
        """
        body: Json = {"worker_id": worker_id, "max_tasks": max_tasks, "wait_seconds": wait_seconds}
        if queue is not None:
            body["queue"] = queue
        timeout = max(self.timeout, wait_seconds + LONG_POLL_MARGIN_SECONDS)
        return self._request("POST", "/workers/claim", json=body, retry=True, timeout=timeout)["tasks"]

    def heartbeat(self, worker_id: str, task_id: TaskId, lease_token: str | None = None) -> Json:
        """Extend the lease; ``LeaseLost`` means stop working on the task."""
        body = {"worker_id": worker_id, "task_id": str(task_id), "lease_token": lease_token}
        return self._request("POST", "/workers/heartbeat", json=body, retry=True)

    def ack(
        self,
        worker_id: str,
        task_id: TaskId,
        lease_token: str | None = None,
        result: Mapping[str, Any] | None = None,
    ) -> Json:
        body = {
            "worker_id": worker_id,
            "task_id": str(task_id),
            "lease_token": lease_token,
            "result": None if result is None else dict(result),
        }
        return self._request("POST", "/workers/ack", json=body)

    def nack(
        self,
        worker_id: str,
        task_id: TaskId,
        error: str,
        lease_token: str | None = None,
        *,
        retry: bool = True,
        retry_after_seconds: int | None = None,
    ) -> Json:
        body = {
            "worker_id": worker_id,
            "task_id": str(task_id),
            "lease_token": lease_token,
            "error": error,
            "retry": retry,
            "retry_after_seconds": retry_after_seconds,
        }
        return self._request("POST", "/workers/nack", json=body)

    def ack_batch(self, worker_id: str, items: Iterable[Mapping[str, Any]]) -> list[Json]:
        """Ack 1-100 tasks: items ``{"task_id", "lease_token", "result"}``. Each item is judged
        alone: the answer holds, in order, ``{"task_id", "status"}`` or ``{"task_id", "error"}``."""
        body = {"worker_id": worker_id, "items": [_item(item) for item in items]}
        return self._request("POST", "/workers/ack/batch", json=body)["results"]

    def nack_batch(self, worker_id: str, items: Iterable[Mapping[str, Any]]) -> list[Json]:
        """Nack 1-100 tasks: items ``{"task_id", "lease_token", "error", "retry", "retry_after_seconds"}``."""
        body = {"worker_id": worker_id, "items": [_item(item) for item in items]}
        return self._request("POST", "/workers/nack/batch", json=body)["results"]

    # -- transport ---------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Json | None = None,
        retry: bool = False,
        timeout: float | None = None,
    ) -> Any:
        attempts = 1 + (self.retries if retry else 0)
        for attempt in range(attempts):
            last = attempt + 1 == attempts
            try:
                response = self._http.request(
                    method, path, json=json, timeout=httpx.Timeout(timeout) if timeout else httpx.USE_CLIENT_DEFAULT
                )
            except httpx.TransportError as exc:
                if last:
                    raise ConnectionFailed(f"{method} {self.base_url}{path}: {exc!r}") from exc
                self._pause(attempt)
                continue
            if response.status_code == 503 and not last:
                self._pause(attempt, response.headers.get("Retry-After"))
                continue
            if response.is_success:
                return response.json() if response.content else None
            raise error_from_response(response)
        raise AssertionError("unreachable")  # pragma: no cover

    def _pause(self, attempt: int, retry_after: str | None = None) -> None:
        delay = self.backoff_seconds * 2**attempt
        delay += random.uniform(0, self.backoff_seconds)
        if retry_after and retry_after.isdigit():
            delay = max(delay, min(float(retry_after), MAX_RETRY_AFTER_SECONDS))
        time.sleep(delay)


def _item(item: Mapping[str, Any]) -> Json:
    fields = dict(item)
    fields["task_id"] = str(fields["task_id"])
    return fields
