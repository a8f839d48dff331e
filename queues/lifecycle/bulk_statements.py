"""Named statements for the operations that may touch a whole queue or table: purge, queue
deletion, forgetting long-gone workers.

Each one handles at most ``%(limit)s`` tasks and is committed on its own by
its caller (``queues.lifecycle.operate``), which loops: a queue with a million
tasks never becomes one statement holding a million row locks, one huge WAL
burst, or a million payloads read into Python. They return only what the
caller reports (ids, statuses, timings), never payloads or results.

They are part of ``queues.lifecycle.statements.ALL`` (EXPLAINed by the tests
with every other statement).
"""

from __future__ import annotations

# Purge, one batch: cancel up to ``limit`` pending and retry tasks of the queue.
# The candidates come from the (queue, status, ...) index and stop at the limit;
# they are then locked in id order, the order every bulk move locks in, and the
# lock re-checks the status (a task claimed meanwhile is left alone). Its history
# is recorded in the same statement, as for every move.
PURGE_BATCH = """
WITH candidates AS (
    SELECT t.id FROM tf_task t
    WHERE t.queue_id = %(queue_id)s AND t.status IN ('pending', 'retry')
    LIMIT %(limit)s
), old AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at
    FROM tf_task t
    WHERE t.id IN (SELECT id FROM candidates) AND t.queue_id = %(queue_id)s AND t.status IN ('pending', 'retry')
    ORDER BY t.id
    FOR UPDATE OF t
), moved AS (
    UPDATE tf_task t
    SET status = 'cancelled', finished_at = now(), updated_at = now(), status_changed_at = now()
    FROM old WHERE t.id = old.id
    RETURNING t.id, t.queue_id, t.status, t.attempts, t.claimed_by, t.claimed_at,
              old.from_status, old.from_changed_at, NULL::text AS event_worker, %(detail)s::text AS event_detail
), events AS (
    INSERT INTO tf_task_event (task_id, queue_id, kind, at, from_status, to_status, worker_id, detail)
    SELECT m.id, m.queue_id, %(event_kind)s, now(), m.from_status, m.status, m.event_worker, m.event_detail
    FROM moved m
)
SELECT m.*,
       (extract(epoch FROM now() - m.from_changed_at) * 1000)::float8 AS duration_ms,
       extract(epoch FROM now() - m.claimed_at)::float8 AS execution_seconds
FROM moved m
"""

# Queue deletion, one batch of its finished history: up to ``limit`` done or
# cancelled tasks with their DLQ entries and events. SKIP LOCKED: a row busy
# elsewhere is taken by a later batch or by the final, locked step.
DELETE_QUEUE_FINISHED_BATCH = """
WITH doomed AS (
    SELECT t.id FROM tf_task t
    WHERE t.queue_id = %(queue_id)s AND t.status IN ('done', 'cancelled')
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone_letters AS (
    DELETE FROM tf_dead_letter WHERE id IN (SELECT id FROM doomed)
), gone_events AS (
    DELETE FROM tf_task_event WHERE task_id IN (SELECT id FROM doomed)
)
DELETE FROM tf_task WHERE id IN (SELECT id FROM doomed) RETURNING id
"""

# The worker registry (tf_worker, one row per worker id ever seen), one batch:
# forget workers not seen for longer than the retention period. Worker ids are
# often host names or pod names, so without this the table only grows.
PRUNE_UNSEEN_WORKERS = """
DELETE FROM tf_worker WHERE worker_id IN (
    SELECT w.worker_id FROM tf_worker w
    WHERE w.last_seen_at < now() - make_interval(days => %(days)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING worker_id
"""

#: This module's statements, name -> SQL (merged into ``statements.ALL``).
ALL: dict[str, str] = {
    name: value
    for name, value in dict(globals()).items()
    if name.isupper() and not name.startswith("_") and isinstance(value, str)
}
