"""Many ``enqueue`` calls, from any number of threads, sent as a few batch requests.

``TaskForgeClient.batch(queue)`` makes a ``BatchingProducer``. Its
``enqueue`` returns at once with a ``TaskHandle``; a background flusher
thread sends the pending tasks as one ``POST /queues/{name}/tasks/batch``
when ``max_size`` are pending or the oldest has waited ``max_delay`` seconds,
and completes every handle with its own task (or its own error).

* Each task gets an ``idempotency_key`` unless it has one (``batch-`` and a
  random UUID), so every batch request may be retried under the client's
  retry rules (a lost answer, a 503): a repeated batch returns the tasks it
  created the first time and never creates them twice.
* A batch is all or nothing on the server. When it is refused because of some
  of its tasks (a 400 naming them by index, a body too large, a payload that
  is not JSON), those tasks' handles get the error and the others are sent
  again; an error about the whole request (unknown queue, bad key, server
  unreachable after the retries) goes to every task of that batch.
* ``close()`` (or leaving the ``with`` block) sends everything pending and
  waits for it; ``enqueue`` after that raises ``RuntimeError``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from taskforge_client.bodies import Json, enqueue_body
from taskforge_client.errors import PayloadTooLarge, ValidationError

__all__ = ["MAX_BATCH_SIZE", "BatchingProducer", "TaskHandle"]

MAX_BATCH_SIZE = 1000  # the contract's limit per batch request
IDEMPOTENCY_PREFIX = "batch-"


class BatchSender(Protocol):
    """What the producer needs of a client (``TaskForgeClient`` is one): it never imports the client."""

    def enqueue_batch(self, queue: str, tasks: Iterable[Mapping[str, Any]]) -> list[Json]: ...


class TaskHandle(Future[Json]):
    """The task an ``enqueue`` will create: ``result(timeout)`` is the task, ``task_id`` its id.

    Both wait until the task's batch is committed and raise the error that
    kept this task from being created (a ``TaskForgeError``, or
    ``TypeError``/``ValueError`` for a payload that is not JSON).
    """

    @property
    def task_id(self) -> str:
        return str(self.result()["id"])


@dataclass
class _Pending:
    body: Json
    handle: TaskHandle = field(default_factory=TaskHandle)
    since: float = field(default_factory=time.monotonic)


class BatchingProducer:
    """Gathers ``enqueue`` calls into batch requests; safe to share between threads."""

    def __init__(self, client: BatchSender, queue: str, *, max_size: int = 100, max_delay: float = 0.01) -> None:
        if not 1 <= max_size <= MAX_BATCH_SIZE:
            raise ValueError(f"max_size must be between 1 and {MAX_BATCH_SIZE}")
        if max_delay < 0:
            raise ValueError("max_delay must not be negative")
        self.client = client
        self.queue = queue
        self.max_size = max_size
        self.max_delay = max_delay
        self._pending: list[_Pending] = []
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._flusher = threading.Thread(target=self._run, name=f"taskforge-batch-{queue}", daemon=True)
        self._flusher.start()

    # -- producer side (any thread)

    def enqueue(
        self,
        payload: Mapping[str, Any],
        *,
        priority: int | None = None,
        scheduled_at: datetime | str | None = None,
        idempotency_key: str | None = None,
        max_retries: int | None = None,
    ) -> TaskHandle:
        """Queue one task for the next batch; returns its handle at once (see ``TaskForgeClient.enqueue``)."""
        body = enqueue_body(
            payload,
            priority=priority,
            scheduled_at=scheduled_at,
            idempotency_key=idempotency_key or f"{IDEMPOTENCY_PREFIX}{uuid.uuid4()}",
            max_retries=max_retries,
        )
        pending = _Pending(body)
        with self._wake:
            if self._closed:
                raise RuntimeError("this batching producer is closed")
            self._pending.append(pending)
            if len(self._pending) == 1 or len(self._pending) >= self.max_size:
                self._wake.notify()
        return pending.handle

    def flush(self, timeout: float | None = None) -> None:
        """Send what is pending now, without waiting for ``max_delay``; wait until it is answered."""
        with self._wake:
            handles = [pending.handle for pending in self._pending]
            for pending in self._pending:
                pending.since = 0.0  # due at once
            self._wake.notify()
        deadline = None if timeout is None else time.monotonic() + timeout
        for handle in handles:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            handle.exception(remaining)  # waits; the error stays for the handle's owner

    def close(self, timeout: float | None = None) -> None:
        """Send everything pending, wait for it (up to ``timeout``), and stop the flusher thread."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._flusher.join(timeout)

    def __enter__(self) -> BatchingProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the flusher thread

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._send(batch)

    def _next_batch(self) -> list[_Pending] | None:
        """Wait until a batch is due (full, old enough, or closing); None once closed and empty."""
        with self._wake:
            while True:
                if self._pending:
                    wait = self._pending[0].since + self.max_delay - time.monotonic()
                    if self._closed or len(self._pending) >= self.max_size or wait <= 0:
                        batch, self._pending = self._pending[: self.max_size], self._pending[self.max_size :]
                        return batch
                elif self._closed:
                    return None
                else:
                    wait = None
                self._wake.wait(wait)

    def _send(self, batch: list[_Pending]) -> None:
        """Create the batch's tasks; every handle ends with its task or its own error."""
        try:
            created = self.client.enqueue_batch(self.queue, [pending.body for pending in batch])
        except ValidationError as exc:
            culprits = _refused_items(exc, len(batch))
            if not culprits:
                _fail(batch, exc)
                return
            for index in culprits:
                own = ValidationError(exc.message, code=exc.code, status=exc.status, fields=culprits[index])
                _fail([batch[index]], own)
            self._send_rest(batch, set(culprits))
        except PayloadTooLarge as exc:
            if len(batch) == 1:
                _fail(batch, exc)
                return
            half = len(batch) // 2  # the body cap is per request: smaller requests may each pass
            self._send(batch[:half])
            self._send(batch[half:])
        except (TypeError, ValueError) as exc:
            unencodable = _unencodable_items(batch)
            if not unencodable:
                _fail(batch, exc)
                return
            for index, error in unencodable.items():
                _fail([batch[index]], error)
            self._send_rest(batch, set(unencodable))
        except Exception as exc:  # the rest of TaskForgeError, or a bug: never lose a handle
            _fail(batch, exc)
        else:
            for pending, task in zip(batch, created, strict=True):
                pending.handle.set_result(task)

    def _send_rest(self, batch: list[_Pending], refused: set[int]) -> None:
        rest = [pending for index, pending in enumerate(batch) if index not in refused]
        if rest:
            self._send(rest)


def _fail(batch: list[_Pending], error: BaseException) -> None:
    for pending in batch:
        pending.handle.set_exception(error)


def _refused_items(exc: ValidationError, size: int) -> dict[int, dict[str, list[str]]]:
    """The items a batch 400 names (``fields`` keyed ``"3.priority"``), each with its own fields."""
    culprits: dict[int, dict[str, list[str]]] = {}
    for key, messages in (exc.fields or {}).items():
        index, _, name = key.partition(".")
        if not index.isdigit() or int(index) >= size:
            return {}  # an error about the request itself: it is everyone's
        culprits.setdefault(int(index), {})[name or "task"] = messages
    return culprits


def _unencodable_items(batch: list[_Pending]) -> dict[int, Exception]:
    """The items whose body is not JSON the contract accepts (no NaN, only JSON types)."""
    errors: dict[int, Exception] = {}
    for index, pending in enumerate(batch):
        try:
            json.dumps(pending.body, allow_nan=False)
        except (TypeError, ValueError) as exc:
            errors[index] = exc
    return errors
