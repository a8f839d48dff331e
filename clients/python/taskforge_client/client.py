"""A Python client for the TaskForge HTTP API (producer and worker calls).

Needs only the standard library and httpx: it never imports Django, so any
Python service can enqueue tasks or run a worker with it.

* One pool of keep-alive connections per ``TaskForgeClient``, safe to share
  between threads: the standard library's ``http.client`` for a plain
  ``http://`` API (``taskforge_client.connections``, about a third of httpx's
  CPU per call), an ``httpx.Client`` for ``https://``, a proxy from the
  environment or a ``transport`` of the caller's.
* Retries (connection errors and 503, with exponential backoff and jitter)
  happen only where repeating the request cannot do harm: ``claim``,
  ``heartbeat``, reads, and enqueues that carry an ``idempotency_key``. A
  repeated ack or nack is left to the caller, who knows whether the lease
  still matters.
* Every error answer becomes an exception named after the contract's error
  code (``taskforge_client.errors``).
* A single call costs little beyond the socket's own: answers are decoded
  with orjson when it is installed, and nothing is logged or deep-copied per
  call (through httpx, the URLs of repeated calls are parsed once).
* ``batch()`` gathers many ``enqueue`` calls, from any number of threads,
  into batch requests (``taskforge_client.batching``).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from taskforge_client.bodies import Json, enqueue_body
from taskforge_client.connections import Answer, open_sender
from taskforge_client.errors import ConnectionFailed, ServerError, error_from_response
from taskforge_client.version import __version__

if TYPE_CHECKING:
    from taskforge_client.batching import BatchingProducer


def _standard_decode(content: bytes | bytearray | memoryview | str) -> Any:  # orjson.loads's signature
    return json.loads(bytes(content) if isinstance(content, memoryview) else content)


try:  # orjson decodes answers (a 1000-task batch above all) several times faster than json
    from orjson import loads as decode_json
except ImportError:  # pragma: no cover - orjson is optional
    decode_json = _standard_decode

__all__ = ["ClaimedTasks", "TaskForgeClient"]

DEFAULT_TIMEOUT = 15.0
DEFAULT_RETRIES = 3
# A long poll is answered after wait_seconds: the read must be allowed longer.
LONG_POLL_MARGIN_SECONDS = 5.0
MAX_RETRY_AFTER_SECONDS = 30.0
USER_AGENT = f"taskforge-python-client/{__version__}"

TaskId = str | uuid.UUID


class ClaimedTasks(list[Json]):
    """The tasks of a claim answer, and ``control``: ``"quiet"``, ``"stop"`` or None (see ``claim``)."""

    def __init__(self, tasks: Iterable[Json] = (), control: str | None = None) -> None:
        super().__init__(tasks)
        self.control = control


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
        user_agent: str = USER_AGENT,
    ) -> None:
        if not api_key:
            raise ValueError("an API key is required")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.retries = max(0, int(retries))
        self.backoff_seconds = backoff_seconds
        headers = {"Authorization": f"Bearer {api_key}", "User-Agent": user_agent, "Accept": "application/json"}
        self._sender = open_sender(self.base_url, headers, self.timeout, transport)

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        self._sender.close()

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
        kind: str | None = None,
        timeout_seconds: int | None = None,
    ) -> Json:
        """Add one task; returns the task. Retried on failure only with an ``idempotency_key``.

        ``kind`` says what the task is (``emails.send_welcome``); ``timeout_seconds``
        is the time limit of one attempt (overrides the queue's).
        """
        body = enqueue_body(
            payload,
            priority=priority,
            scheduled_at=scheduled_at,
            idempotency_key=idempotency_key,
            max_retries=max_retries,
            kind=kind,
            timeout_seconds=timeout_seconds,
        )
        answer: Json = self._request(
            "POST", f"/queues/{_part(queue)}/tasks", json=body, retry=idempotency_key is not None
        )
        return answer

    def batch(self, queue: str, *, max_size: int = 100, max_delay: float = 0.01) -> BatchingProducer:
        """A producer that sends ``enqueue`` calls to ``queue`` in batch requests; thread-safe.

        ``producer.enqueue(payload, **options)`` returns at once with a
        ``TaskHandle`` (a ``concurrent.futures.Future``) whose ``task_id`` (or
        ``result()``, the task) is there once its batch is committed. A batch
        is sent when it holds ``max_size`` tasks or its oldest has waited
        ``max_delay`` seconds; ``close()``, or leaving the ``with`` block,
        sends whatever is pending and waits for it.
        """
        from taskforge_client.batching import BatchingProducer

        return BatchingProducer(self, queue, max_size=max_size, max_delay=max_delay)

    def enqueue_batch(self, queue: str, tasks: Iterable[Mapping[str, Any]]) -> list[Json]:
        """Add 1-1000 tasks at once, all or nothing. Each item is an enqueue body
        (``{"payload": ..., "priority": ...}``); retried only when every item has an idempotency key."""
        items = []
        for item in tasks:
            fields = dict(item)
            payload = fields.pop("payload")
            items.append(enqueue_body(payload, **fields))
        retry = bool(items) and all("idempotency_key" in item for item in items)
        created: list[Json] = self._request(
            "POST", f"/queues/{_part(queue)}/tasks/batch", json={"tasks": items}, retry=retry
        )["tasks"]
        return created

    def get_task(self, queue: str, task_id: TaskId, *, wait_seconds: int = 0) -> Json:
        """One task with its ``history`` of transitions.

        ``wait_seconds`` (0-30): answer as soon as the task is done, dead or
        cancelled, or when the wait is over, with the task as it then is.
        """
        return self._read_task(f"/queues/{_part(queue)}/tasks/{_part(task_id)}", wait_seconds)

    def find_task(self, task_id: TaskId, *, wait_seconds: int = 0) -> Json:
        """One task with its ``history``, whatever its queue (``GET /tasks/{id}``); ``wait_seconds`` as above."""
        return self._read_task(f"/tasks/{_part(task_id)}", wait_seconds)

    def _read_task(self, path: str, wait_seconds: int) -> Json:
        if not wait_seconds:
            answer: Json = self._request("GET", path, retry=True)
            return answer
        # The answer may come only after the wait: the read must be allowed longer.
        timeout = max(self.timeout, wait_seconds + LONG_POLL_MARGIN_SECONDS)
        answer = self._request("GET", f"{path}?wait_seconds={int(wait_seconds)}", retry=True, timeout=timeout)
        return answer

    def cancel(self, queue: str, task_id: TaskId) -> Json:
        """Cancel a task: ``pending``/``retry`` ones at once (status ``cancelled``); a running one is
        answered with ``cancel_requested: true`` and its worker is told to stop. ``Conflict`` once finished."""
        answer: Json = self._request("DELETE", f"/queues/{_part(queue)}/tasks/{_part(task_id)}")
        return answer

    def stats(self, queue: str) -> Json:
        answer: Json = self._request("GET", f"/queues/{_part(queue)}/stats", retry=True)
        return answer

    def dead_letters(self, queue: str) -> list[Json]:
        """The queue's dead-letter entries, newest death first (admin key; first page)."""
        answers: list[Json] = self._request("GET", f"/queues/{_part(queue)}/dlq", retry=True)["results"]
        return answers

    def create_queue(self, name: str, **settings: Any) -> Json:
        """Create a queue (admin key): ``max_retries``, ``rate_limit``, ``retry_base_ms``..."""
        answer: Json = self._request("POST", "/queues", json={"name": name, **settings})
        return answer

    # -- operator calls (admin key) ----------------------------------------

    def queues(self) -> list[Json]:
        """Every queue, by name."""
        answers: list[Json] = self._request("GET", "/queues", retry=True)["results"]
        return answers

    def update_queue(self, name: str, **settings: Any) -> Json:
        """Change a queue's settings (``paused=True`` pauses it); returns the queue."""
        answer: Json = self._request("PATCH", f"/queues/{_part(name)}", json=settings)
        return answer

    def replay(self, queue: str, task_id: TaskId) -> Json:
        """Put one dead task back to ``pending``; returns the task. ``NotFound`` for a task that never died."""
        answer: Json = self._request("POST", f"/queues/{_part(queue)}/dlq/{_part(task_id)}/replay")
        return answer

    def replay_many(self, queue: str, task_ids: Iterable[TaskId] | None = None) -> int:
        """Replay the dead tasks named (1-1000), or every dead task of the queue when none are named;
        returns how many were replayed (ids that are not dead are skipped)."""
        body: Json = {"all": True} if task_ids is None else {"ids": [str(task_id) for task_id in task_ids]}
        replayed: int = self._request("POST", f"/queues/{_part(queue)}/dlq/replay", json=body)["replayed"]
        return replayed

    def workers(self) -> list[Json]:
        """The workers seen in the last 10 minutes, with the tasks each holds."""
        answers: list[Json] = self._request("GET", "/workers", retry=True)["results"]
        return answers

    def control_worker(self, worker_id: str, action: str) -> Json:
        """``action`` ``"quiet"`` (claim nothing, finish what it holds), ``"stop"`` (then exit) or
        ``"resume"`` (back to work) for one worker; returns the worker as ``workers()`` lists it."""
        answer: Json = self._request("POST", f"/workers/{_part(worker_id)}/{_part(action)}")
        return answer

    def schedules(self) -> list[Json]:
        """Every periodic schedule, with its next and last run."""
        answers: list[Json] = self._request("GET", "/schedules", retry=True)["results"]
        return answers

    # -- worker calls ------------------------------------------------------

    def claim(
        self, worker_id: str, queue: str | None = None, *, max_tasks: int = 1, wait_seconds: int = 0
    ) -> ClaimedTasks:
        """Claim up to ``max_tasks`` tasks, long-polling up to ``wait_seconds``.

        Each task carries ``lease_token`` and ``lease_expires_at``. The list's
        ``control`` says what an operator asked this worker: ``"quiet"`` (claim
        nothing, finish what it holds; the answer then has no tasks),
        ``"stop"`` (the same, then exit) or None. If an answer
        is lost and the call retried, the tasks of the lost answer stay leased
        to this worker until their lease expires, then run again.
        """
        body: Json = {"worker_id": worker_id, "max_tasks": max_tasks, "wait_seconds": wait_seconds}
        if queue is not None:
            body["queue"] = queue
        timeout = max(self.timeout, wait_seconds + LONG_POLL_MARGIN_SECONDS)
        answer = self._request("POST", "/workers/claim", json=body, retry=True, timeout=timeout)
        return ClaimedTasks(answer["tasks"], answer.get("control"))

    def heartbeat(
        self,
        worker_id: str,
        task_id: TaskId,
        lease_token: str | None = None,
        *,
        timeout: float | None = None,
        retry: bool = True,
        progress: Mapping[str, Any] | None = None,
    ) -> Json:
        """Extend the lease; ``LeaseLost`` means stop working on the task.

        A worker that holds many leases passes a short ``timeout`` and
        ``retry=False`` and retries itself, so one slow call never outlasts a lease.
        ``progress`` (a JSON object, at most 4 KiB) becomes the task's ``progress``.
        The answer carries ``cancel_requested: true`` once a producer cancelled the task.
        """
        body: Json = {"worker_id": worker_id, "task_id": str(task_id), "lease_token": lease_token}
        if progress is not None:
            body["progress"] = dict(progress)
        answer: Json = self._request("POST", "/workers/heartbeat", json=body, retry=retry, timeout=timeout)
        return answer

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
        answer: Json = self._request("POST", "/workers/ack", json=body)
        return answer

    def nack(
        self,
        worker_id: str,
        task_id: TaskId,
        error: str,
        lease_token: str | None = None,
        *,
        retry: bool = True,
        retry_after_seconds: int | None = None,
        release: bool = False,
    ) -> Json:
        """Fail an attempt. ``release``: the task was never started; it is put back without
        using up an attempt (a worker handing back what it prefetched)."""
        body: dict[str, Any] = {
            "worker_id": worker_id,
            "task_id": str(task_id),
            "lease_token": lease_token,
            "error": error,
            "retry": retry,
            "retry_after_seconds": retry_after_seconds,
        }
        if release:
            body["release"] = True
        answer: Json = self._request("POST", "/workers/nack", json=body)
        return answer

    def ack_batch(self, worker_id: str, items: Iterable[Mapping[str, Any]]) -> list[Json]:
        """Ack 1-100 tasks: items ``{"task_id", "lease_token", "result"}``. Each item is judged
        alone: the answer holds, in order, ``{"task_id", "status"}`` or ``{"task_id", "error"}``."""
        body = {"worker_id": worker_id, "items": [_item(item) for item in items]}
        answers: list[Json] = self._request("POST", "/workers/ack/batch", json=body)["results"]
        return answers

    def nack_batch(
        self, worker_id: str, items: Iterable[Mapping[str, Any]], *, timeout: float | None = None
    ) -> list[Json]:
        """Nack 1-100 tasks: items ``{"task_id", "lease_token", "error", "retry", "retry_after_seconds"}``
        (and ``"release": true`` for a task never started).
        ``timeout`` overrides the client's for this call (a worker handing tasks back at shutdown)."""
        body = {"worker_id": worker_id, "items": [_item(item) for item in items]}
        answers: list[Json] = self._request("POST", "/workers/nack/batch", json=body, timeout=timeout)["results"]
        return answers

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
        content = None if json is None else encode_json(json)
        for attempt in range(attempts):
            last = attempt + 1 == attempts
            try:
                response = self._sender.send(method, path, content, timeout)
            except ConnectionFailed:
                if last:
                    raise
                self._pause(attempt)
                continue
            if response.status_code == 503 and not last:
                self._pause(attempt, response.headers.get("Retry-After"))
                continue
            if response.is_success:
                return _decoded(response, method, path)
            raise error_from_response(response)
        raise AssertionError("unreachable")  # pragma: no cover

    def _pause(self, attempt: int, retry_after: str | None = None) -> None:
        delay = self.backoff_seconds * 2**attempt
        delay += random.uniform(0, self.backoff_seconds)
        if retry_after and retry_after.isdigit():
            delay = max(delay, min(float(retry_after), MAX_RETRY_AFTER_SECONDS))
        time.sleep(delay)


def encode_json(body: Json) -> bytes:
    """A request body, encoded as httpx encodes ``json=``: compact, UTF-8, and no NaN or infinity,
    which are not JSON (``ValueError`` before anything is sent)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _decoded(response: httpx.Response | Answer, method: str, path: str) -> Any:
    """A success answer's JSON; one that is not JSON (a proxy's page, a cut-off body) is a ``ServerError``,
    so callers treat it like any other failed call instead of meeting a decoder's exception."""
    content = response.content
    if not content:
        return None
    try:
        return decode_json(content)
    except ValueError:  # orjson.JSONDecodeError and json.JSONDecodeError both are
        snippet = content[:200].decode("utf-8", "replace")
        raise ServerError(
            f"{method} {path} answered {response.status_code} with a body that is not JSON: {snippet!r}",
            code="invalid_answer",
            status=response.status_code,
        ) from None


def _part(value: TaskId) -> str:
    """One path segment, percent-encoded: a queue name or task id never changes which URL is called."""
    return quote(str(value), safe="")


def _item(item: Mapping[str, Any]) -> Json:
    fields = dict(item)
    fields["task_id"] = str(fields["task_id"])
    return fields
