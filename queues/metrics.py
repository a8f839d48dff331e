"""Prometheus metrics for task transitions.

A first, single-process version: counters live in this process. The
cross-process aggregation belongs with the observability work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Histogram

TASKS_ENQUEUED = Counter("taskforge_tasks_enqueued", "Tasks accepted by enqueue", ["queue"])
TASKS_COMPLETED = Counter("taskforge_tasks_completed", "Finished attempts and cancels by outcome", ["queue", "status"])
EXECUTION_SECONDS = Histogram(
    "taskforge_task_execution_duration_seconds",
    "Claim to ack/nack/expiry",
    ["queue"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)


def completion_status(row: dict[str, Any]) -> str | None:
    """The ``status`` label of ``taskforge_tasks_completed_total`` for a move, if any."""
    to_status, from_status = row["status"], row["from_status"]
    if from_status not in ("claimed", "executing") and to_status != "cancelled":
        return None
    if to_status == "done":
        return "done"
    if to_status == "cancelled":
        return "cancelled"
    if row.get("expired"):
        return "expired"
    if to_status == "dead":
        return "dead"
    if to_status == "retry":
        return "failed"
    return None


def record_transitions(rows: list[dict[str, Any]], queue_name: Callable[[Any], str]) -> None:
    for row in rows:
        queue = queue_name(row["queue_id"])
        if row["from_status"] is None:
            TASKS_ENQUEUED.labels(queue).inc()
            continue
        status = completion_status(row)
        if status is None:
            continue
        TASKS_COMPLETED.labels(queue, status).inc()
        if status != "cancelled" and row.get("execution_seconds") is not None:
            EXECUTION_SECONDS.labels(queue).observe(float(row["execution_seconds"]))
