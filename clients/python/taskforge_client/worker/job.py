"""What a handler is given besides the payload: the claimed task, its cancel flag and progress reports."""

from __future__ import annotations

import contextvars
import json
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_PROGRESS_BYTES", "CancelFlag", "Job", "current_job"]

# The contract's cap on one progress report, serialized.
MAX_PROGRESS_BYTES = 4096

_CURRENT: contextvars.ContextVar[Job] = contextvars.ContextVar("taskforge_job")


def current_job() -> Job:
    """The job of the task running in this thread (or coroutine); ``LookupError`` outside a task."""
    try:
        return _CURRENT.get()
    except LookupError:
        raise LookupError("current_job() is only available while a task runs") from None


class CancelFlag(threading.Event):
    """A ``threading.Event`` that is also true once set: ``if job.cancelled:`` and ``job.cancelled.wait(5)``."""

    def __bool__(self) -> bool:
        return self.is_set()


@dataclass
class Job:
    """The claimed task a handler runs, and a flag that tells it to stop.

    ``cancelled`` is set when the lease was lost (another worker may now run the
    task), its execution time limit passed, the shutdown grace period ran out,
    or a producer cancelled the running task (then ``cancel_requested`` is true
    too, and the task is nacked, so it ends ``cancelled``, whatever the handler
    does next): a long handler should check ``job.cancelled`` (or wait on it
    instead of sleeping) and stop.
    ``id`` is stable across attempts: the natural idempotency key for whatever
    the handler does downstream. ``progress({...})`` reports how far it got.
    """

    id: str
    queue: str
    payload: dict[str, Any]
    attempts: int
    max_retries: int
    worker_id: str
    lease_token: str | None
    task: dict[str, Any]
    cancelled: CancelFlag = field(default_factory=CancelFlag)
    kind: str | None = None
    cancel_requested: bool = False
    _progress: dict[str, Any] | None = field(default=None, repr=False)
    _progress_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_claim(cls, task: dict[str, Any], *, worker_id: str, default_queue: str | None) -> Job:
        """The job for one task of a claim answer."""
        kind = task.get("kind")
        return cls(
            id=str(task["id"]),
            queue=str(task.get("queue", default_queue or "")),
            payload=task.get("payload") or {},
            attempts=int(task.get("attempts") or 1),
            max_retries=int(task.get("max_retries") or 0),
            worker_id=worker_id,
            lease_token=task.get("lease_token"),
            task=task,
            kind=kind if isinstance(kind, str) else None,
        )

    def progress(self, report: dict[str, Any]) -> None:
        """Report progress (a JSON object, at most 4 KiB): sent with the next heartbeat, shown as the
        task's ``progress``. A later report replaces one not yet sent."""
        if not isinstance(report, dict):
            raise TypeError(f"progress must be a dict (a JSON object), got {type(report).__name__}")
        try:
            size = len(json.dumps(report, ensure_ascii=False, allow_nan=False).encode("utf-8"))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"progress is not valid JSON: {exc}") from None
        if size > MAX_PROGRESS_BYTES:
            raise ValueError(f"progress is {size} bytes serialized; at most {MAX_PROGRESS_BYTES}")
        with self._progress_lock:
            self._progress = dict(report)

    def take_progress(self) -> dict[str, Any] | None:
        """The report waiting to be sent, now taken (the heartbeat thread's side)."""
        with self._progress_lock:
            report, self._progress = self._progress, None
            return report

    def put_back_progress(self, report: dict[str, Any]) -> None:
        """A heartbeat carrying ``report`` failed: send it with the next one, unless a newer one came."""
        with self._progress_lock:
            if self._progress is None:
                self._progress = report

    def request_cancel(self) -> None:
        """A heartbeat answer said a producer cancelled the task: stop, and nack it when the handler ends."""
        self.cancel_requested = True
        self.cancelled.set()

    def running(self) -> contextvars.Token[Job]:
        """Make this the ``current_job()`` of the calling thread; ``finished(token)`` undoes it."""
        return _CURRENT.set(self)

    @staticmethod
    def finished(token: contextvars.Token[Job]) -> None:
        _CURRENT.reset(token)
