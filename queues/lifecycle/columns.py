"""The columns every lifecycle statement returns for a task (tf_task has no others)."""

from __future__ import annotations

TASK_COLUMNS = """
    t.id, t.queue_id, t.payload, t.status, t.priority, t.scheduled_at, t.created_at, t.updated_at,
    t.status_changed_at, t.claimed_at, t.claimed_by, t.heartbeat_at, t.lease_token,
    t.lease_expires_at, t.attempts, t.max_retries, t.last_error, t.result, t.finished_at,
    t.idempotency_key, t.request_fingerprint, t.kind, t.timeout_seconds, t.cancel_requested, t.progress
"""
