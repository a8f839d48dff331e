"""What a handler is given besides the payload: the claimed task and its cancel flag."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Job"]


@dataclass
class Job:
    """The claimed task a handler runs, and a flag that tells it to stop.

    ``cancelled`` is set when the lease was lost (another worker may now run the
    task), its execution time limit passed or the shutdown grace period ran out: a long handler should check
    ``job.cancelled.is_set()`` (or wait on it instead of sleeping) and stop.
    ``id`` is stable across attempts: the natural idempotency key for whatever
    the handler does downstream.
    """

    id: str
    queue: str
    payload: dict[str, Any]
    attempts: int
    max_retries: int
    worker_id: str
    lease_token: str | None
    task: dict[str, Any]
    cancelled: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def from_claim(cls, task: dict[str, Any], *, worker_id: str, default_queue: str | None) -> Job:
        """The job for one task of a claim answer."""
        return cls(
            id=str(task["id"]),
            queue=str(task.get("queue", default_queue or "")),
            payload=task.get("payload") or {},
            attempts=int(task.get("attempts") or 1),
            max_retries=int(task.get("max_retries") or 0),
            worker_id=worker_id,
            lease_token=task.get("lease_token"),
            task=task,
        )
