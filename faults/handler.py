"""The harness's task handler: records every execution before and after it runs.

The reference worker calls ``record(payload, job)``. Each execution writes a
``start`` line before doing anything and an ``end`` line when it stops, both
fsynced, so a worker killed mid-task still leaves its ``start`` behind. The
checker matches these lines with the claim events in Postgres.

Times are ``CLOCK_MONOTONIC`` (one clock for every process on the machine,
and left alone by faketime with ``DONT_FAKE_MONOTONIC=1``), so a worker whose
wall clock is skewed still logs comparable times; the harness converts them
to real wall time.

Payload: ``sleep_ms`` (how long the task "works", default 100) and ``fail``
(raise after working, so the task is nacked and eventually dead).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

EXEC_DIR_ENV = "TASKFORGE_FAULTS_EXEC_DIR"

_lock = threading.Lock()
_fd: int | None = None


class PlannedFailure(RuntimeError):
    """The payload asked this attempt to fail."""


def _write(line: dict[str, Any]) -> None:
    global _fd
    data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
    with _lock:
        if _fd is None:
            path = os.path.join(os.environ[EXEC_DIR_ENV], f"exec-{os.getpid()}.jsonl")
            _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(_fd, data)
        # Durable before the task goes on: a kill -9 right after must not lose the line.
        os.fsync(_fd)


def record(payload: dict[str, Any], job: Any) -> dict[str, Any]:
    common = {
        "task": job.id,
        "lease": job.lease_token,
        "worker": job.worker_id,
        "attempt": job.attempts,
        "pid": os.getpid(),
    }
    _write({"e": "start", "mono": time.monotonic(), **common})
    # Waiting on the cancel flag instead of sleeping: a worker whose lease was
    # lost (its heartbeat got 409) stops working on the task at once.
    cancelled = job.cancelled.wait(max(0, int(payload.get("sleep_ms", 100))) / 1000)
    failing = bool(payload.get("fail"))
    outcome = "cancelled" if cancelled else "fail" if failing else "ok"
    _write({"e": "end", "mono": time.monotonic(), "outcome": outcome, **common})
    if failing and not cancelled:
        raise PlannedFailure("planned failure (payload fail=true)")
    # The result names the execution whose ack was accepted; the checker uses it.
    return {"lease": job.lease_token, "worker": job.worker_id}
