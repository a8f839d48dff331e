"""Handlers the live worker tests run (``--handler tests.integration.workers.handlers:handle``).

Standard library and ``taskforge_client`` only: the tests run the worker with
Django imports blocked. ``payload["mode"]`` picks the behaviour.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from taskforge_client import Fail, Retry


class FlakyError(RuntimeError):
    """The first attempt of a ``flaky`` task fails with this."""


def handle(payload: dict[str, Any], job: Any) -> dict[str, Any] | None:
    mode = payload.get("mode", "ok")
    if payload.get("sleep_ms"):
        job.cancelled.wait(payload["sleep_ms"] / 1000)
    if payload.get("sleep_first_ms") and job.attempts == 1:
        job.cancelled.wait(payload["sleep_first_ms"] / 1000)
    if mode == "flaky" and job.attempts == 1:
        raise FlakyError("first attempt fails")
    if mode == "retry_after" and job.attempts == 1:
        raise Retry("upstream asked us to come back later", after=payload["after"])
    if mode == "fail_now":
        raise Fail("not worth retrying")
    if mode == "record":
        # One line per completed run: the side effect whose count the tests check.
        with Path(payload["log"]).open("a") as log:
            log.write(json.dumps({"task_id": job.id, "worker_id": job.worker_id, "at": time.time()}) + "\n")
    if mode == "none":
        return None
    return {"mode": mode, "attempt": job.attempts, "worker_id": job.worker_id}
