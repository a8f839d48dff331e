"""What every lifecycle statement shares: the columns it returns for a task (tf_task has no others)
and the history rows a move writes."""

from __future__ import annotations

TASK_COLUMNS = """
    t.id, t.queue_id, t.payload, t.status, t.priority, t.scheduled_at, t.created_at, t.updated_at,
    t.status_changed_at, t.claimed_at, t.claimed_by, t.heartbeat_at, t.lease_token,
    t.lease_expires_at, t.attempts, t.max_retries, t.last_error, t.result, t.finished_at,
    t.idempotency_key, t.request_fingerprint, t.kind, t.timeout_seconds, t.cancel_requested, t.progress,
    t.awaited
"""

# One task by its id, as a fenced subquery named ``t``: the only way in is the
# primary key, whatever the planner guesses of the rest of the statement. A
# statement of one task written with it keeps one plan per connection on the
# event loop (queues.lifecycle.claim_statements; statements.ACK_ONE, READ_HELD_FOR_NACK_ONE
# and FAIL_ONE_IF_UNCHANGED).
ONE_TASK_BY_ID = "(SELECT * FROM tf_task x WHERE x.id = %(task_id)s OFFSET 0) t"

# Appended to a data-modifying CTE named ``moved`` (with ``from_status``,
# ``from_changed_at``, ``event_worker`` and ``event_detail`` columns): records one
# history row per moved task and returns the moved rows with their timings.
RECORD_EVENTS = """
, events AS (
    INSERT INTO tf_task_event (task_id, queue_id, kind, at, from_status, to_status, worker_id, detail)
    SELECT m.id, m.queue_id, %(event_kind)s, now(), m.from_status, m.status, m.event_worker, m.event_detail
    FROM moved m
)
SELECT m.*,
       (extract(epoch FROM now() - m.from_changed_at) * 1000)::float8 AS duration_ms,
       extract(epoch FROM now() - m.claimed_at)::float8 AS execution_seconds
FROM moved m
"""
