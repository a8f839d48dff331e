"""The demo handler: what ``WORKERS=N make run`` and Docker Compose run (``taskforge_client.demo:handle``).

Payload keys it understands: ``sleep_ms`` (work for that long) and
``fail: true`` (raise, so the task is retried and ends in the dead-letter
queue). Anything else succeeds at once.
"""

from __future__ import annotations

import time
from typing import Any

from taskforge_client.worker.job import Job

__all__ = ["DemoFailure", "handle"]


class DemoFailure(Exception):
    """Raised for payloads that ask to fail."""


def handle(payload: dict[str, Any], job: Job) -> dict[str, Any]:
    """Sleep ``sleep_ms``, fail when asked to, else return who ran it and for how long."""
    started = time.monotonic()
    sleep_ms = payload.get("sleep_ms")
    # Waiting on the cancel flag instead of sleeping: a task whose lease was
    # lost, or that outlived the shutdown grace, stops at once.
    if isinstance(sleep_ms, int | float) and sleep_ms > 0 and job.cancelled.wait(sleep_ms / 1000):
        raise DemoFailure("cancelled: lease lost or worker shutting down")
    if payload.get("fail") is True:
        raise DemoFailure(f"payload asked to fail (attempt {job.attempts})")
    return {
        "handled_by": job.worker_id,
        "attempt": job.attempts,
        "slept_ms": round((time.monotonic() - started) * 1000),
    }
