"""Output shapes: the contract's queue, task, history and DLQ objects.

Plain functions over rows (dicts) so the hot endpoints skip ModelSerializer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queues.models import DeadLetterTask, Queue, Schedule

TASK_FIELDS = (
    "id",
    "payload",
    "status",
    "priority",
    "scheduled_at",
    "created_at",
    "updated_at",
    "claimed_at",
    "claimed_by",
    "heartbeat_at",
    "attempts",
    "max_retries",
    "last_error",
    "result",
    "finished_at",
    "idempotency_key",
    "kind",
    "timeout_seconds",
    "cancel_requested",
    "progress",
)


def task(row: Mapping[str, Any], queue_name: str, *, with_lease: bool = False) -> dict[str, Any]:
    body = {"id": row["id"], "queue": queue_name}
    for name in TASK_FIELDS[1:]:
        body[name] = row[name]
    if with_lease:
        body["lease_token"] = row["lease_token"]
        body["lease_expires_at"] = row["lease_expires_at"]
    return body


def queue(q: Queue, *, push_secret: str | None = None) -> dict[str, Any]:
    """The queue object; ``push_secret`` only in the one answer that made the secret."""
    body = {
        "name": q.name,
        "max_retries": q.max_retries,
        "rate_limit": q.rate_limit,
        # The bucket size in force: the stored value, or rate_limit when it is null.
        "rate_burst": q.effective_burst,
        "paused": q.paused,
        "retry_base_ms": q.retry_base_ms,
        "retry_max_delay_ms": q.retry_max_delay_ms,
        "timeout_seconds": q.timeout_seconds,
        "push": q.push,
        "created_at": q.created_at,
        "updated_at": q.updated_at,
    }
    if push_secret is not None:
        body["push_secret"] = push_secret
    return body


def history_entry(event: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "at": event["at"],
        "from_status": event["from_status"],
        "to_status": event["to_status"],
        "worker_id": event["worker_id"],
        "detail": event["detail"],
    }


def dead_letter(entry: DeadLetterTask, queue_name: str) -> dict[str, Any]:
    return {
        "id": entry.task_id,
        "queue": queue_name,
        "payload": entry.payload,
        "last_error": entry.last_error,
        "attempts": entry.attempts,
        "died_at": entry.died_at,
        "replayed_at": entry.replayed_at,
        "replay_count": entry.replay_count,
    }


def schedule(s: Schedule) -> dict[str, Any]:
    return {
        "name": s.name,
        "queue": s.queue.name,
        "cron": s.cron,
        "every_seconds": s.every_seconds,
        "timezone": s.timezone,
        "payload": s.payload,
        "kind": s.kind,
        "priority": s.priority,
        "paused": s.paused,
        "catch_up": s.catch_up,
        "next_run_at": s.next_run_at,
        "last_run_at": s.last_run_at,
        "last_task_id": s.last_task_id,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
    }
