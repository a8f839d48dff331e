"""Every SQL statement of the lifecycle, each variant named and built once at import.

Callers name the statement they run; nothing is patched into SQL when it
runs, and the claim (the hot path) only picks one of eight ready strings
(``queues.lifecycle.claim_statements``).
Benchmarks, plan tests and ``tests/integration/queues/test_statements.py``
(which EXPLAINs every entry of ``ALL`` against the real schema) import these
same names, so what they check is what runs.

The fragments (``_TASK_COLUMNS`` and ``_RECORD_EVENTS`` from
``queues.lifecycle.columns``, ``_HELD``) and the templates with named holes
(``_CANCEL``, ``_REPLAY``) are private:
they exist only to write each shared part once. Every parameter is named
(``%(name)s``), so one dict of parameters can EXPLAIN any statement.

Moves are one statement each: a CTE locks the rows the move may take (the
guard on the current status lives in its WHERE), a data-modifying CTE named
``moved`` changes them, and ``_RECORD_EVENTS`` writes their history in the
same statement, so the history can never disagree with the task.
"""

from __future__ import annotations

from queues.lifecycle import bulk_statements, cancel_statements, claim_statements, columns, decide, read_statements

_TASK_COLUMNS = columns.TASK_COLUMNS


_RECORD_EVENTS = columns.RECORD_EVENTS

# A lease is held by (claimed_by, lease_token) while the task is claimed or
# executing and the lease has not expired: an expired lease is lost even
# before the watchdog gets to it, so a paused worker can never finish a task
# that may already be running elsewhere. ``i`` is the caller's input row.
_HELD = """
    t.status IN ('claimed', 'executing') AND t.claimed_by = i.worker_id
    AND (i.lease_token IS NULL OR t.lease_token = i.lease_token) AND t.lease_expires_at > now()
"""

# When the current attempt reaches its task's time limit (null: no limit, which least()
# skips): no lease, claimed or extended, reaches past it.
_TIME_LIMIT = "t.claimed_at + make_interval(secs => t.timeout_seconds)"


# --- enqueue ----------------------------------------------------------------------------------

# Insert a batch of new pending tasks in one statement; an idempotency key the
# queue already has is skipped by ON CONFLICT DO NOTHING (which waits for a
# concurrent insert of the same key to commit, so exactly one wins).
ENQUEUE = f"""
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(payloads)s::jsonb[], %(priorities)s::smallint[],
                         %(scheduled)s::timestamptz[], %(keys)s::text[], %(retries)s::smallint[],
                         %(prints)s::text[], %(ords)s::int[], %(kinds)s::text[], %(timeouts)s::int[])
        AS i(id, payload, priority, scheduled_at, idempotency_key, max_retries, fingerprint, ord, kind, timeout)
), moved AS (
    INSERT INTO tf_task AS t (id, queue_id, payload, status, priority, scheduled_at, created_at,
                              updated_at, status_changed_at, attempts, max_retries,
                              idempotency_key, request_fingerprint, kind, timeout_seconds)
    SELECT i.id, %(queue_id)s, i.payload, 'pending', i.priority,
           greatest(coalesce(i.scheduled_at, now()), now()), now(), now(), now(), 0,
           coalesce(i.max_retries, %(queue_max_retries)s), i.idempotency_key, i.fingerprint,
           i.kind, coalesce(i.timeout, %(queue_timeout)s::int)
    FROM input i ORDER BY i.ord
    ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING {_TASK_COLUMNS}, NULL::text AS from_status, now() AS from_changed_at,
              NULL::text AS event_worker, NULL::text AS event_detail
)
{_RECORD_EVENTS}
"""

# The tasks an enqueue skipped: answered with the existing task (or a conflict).
TASKS_BY_IDEMPOTENCY_KEYS = f"""
SELECT {_TASK_COLUMNS} FROM tf_task t WHERE t.queue_id = %(queue_id)s AND t.idempotency_key = ANY(%(keys)s)
"""


# --- claim: queues.lifecycle.claim_statements ---------------------------------------------------


# --- heartbeat, ack ---------------------------------------------------------------------------

# Extend a held lease; the first heartbeat moves claimed -> executing. Its own
# events CTE: a heartbeat of an executing task is recorded as kind 'heartbeat',
# the first one as the transition it is.
HEARTBEAT = f"""
WITH i AS (SELECT %(task_id)s::uuid AS id, %(worker_id)s::text AS worker_id, %(lease_token)s::text AS lease_token),
held AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at
    FROM tf_task t JOIN i ON t.id = i.id WHERE {_HELD} FOR UPDATE OF t
), moved AS (
    UPDATE tf_task t
    SET status = 'executing', heartbeat_at = now(), updated_at = now(),
        progress = coalesce(%(progress)s::jsonb, t.progress),  -- a heartbeat without progress keeps the last
        lease_expires_at = least(now() + make_interval(secs => %(lease_seconds)s), {_TIME_LIMIT}),
        status_changed_at = CASE WHEN h.from_status = 'claimed' THEN now() ELSE t.status_changed_at END
    FROM held h WHERE t.id = h.id
    RETURNING {_TASK_COLUMNS}, h.from_status, h.from_changed_at,
              t.claimed_by AS event_worker, NULL::text AS event_detail
), events AS (
    INSERT INTO tf_task_event (task_id, queue_id, kind, at, from_status, to_status, worker_id)
    SELECT m.id, m.queue_id,
           CASE WHEN m.from_status = 'claimed' THEN 'transition' ELSE 'heartbeat' END,
           now(), m.from_status, m.status, m.event_worker
    FROM moved m
)
SELECT m.*, (extract(epoch FROM now() - m.from_changed_at) * 1000)::float8 AS duration_ms,
       extract(epoch FROM now() - m.claimed_at)::float8 AS execution_seconds
FROM moved m
"""

# Finish held tasks with their results in one statement; rows not held are
# simply not returned (the caller tells lost leases from repeats). Locked in id
# order so two batches sharing tasks cannot deadlock. The holes: where the
# acked items come from (``i2``, one row per item with the worker's id) and
# how their tasks are found.
_ACK = f"""
WITH {{items}},
held AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at, i.result
    FROM {{tasks}} WHERE {_HELD}
    ORDER BY t.id FOR UPDATE OF t
), moved AS (
    UPDATE tf_task t
    SET status = 'done', result = h.result, finished_at = now(), updated_at = now(),
        status_changed_at = now(), lease_expires_at = NULL
    FROM held h WHERE t.id = h.id
    RETURNING {_TASK_COLUMNS}, h.from_status, h.from_changed_at,
              t.claimed_by AS event_worker, NULL::text AS event_detail
)
{_RECORD_EVENTS}
"""

# A batch of items, as arrays.
ACK = _ACK.format(
    items="""i AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::text[], %(results)s::jsonb[])
        AS i(id, lease_token, result)
), i2 AS (SELECT i.*, %(worker_id)s::text AS worker_id FROM i)""",
    tasks="tf_task t JOIN i2 i ON t.id = i.id",
)

# One item, as plain parameters: Postgres keeps one plan of it per connection, where the
# batch form is planned afresh on most runs (0.25 ms of Postgres CPU per ack against
# 0.54-0.56, 2,000 acks in a row). Its task is fenced as a claim's proposed id is: a kept
# plan otherwise read every task the worker holds (tf_task_held_by) to find the one. Run on
# the event loop's connections only, whose kept plans cannot read the whole table
# (queues.lifecycle.claim_statements, _BY_ONE_ID).
ACK_ONE = _ACK.format(
    items="""i2 AS (SELECT %(task_id)s::uuid AS id, %(lease_token)s::text AS lease_token,
                  %(result)s::jsonb AS result, %(worker_id)s::text AS worker_id)""",
    tasks=f"{columns.ONE_TASK_BY_ID} CROSS JOIN i2 i",
)


# --- failures: nack and lease expiry ----------------------------------------------------------
# A failure is two statements in one transaction: lock the rows with what the
# retry-or-dead decision needs, decide in Python (queues.lifecycle.decide, where
# the jittered backoff is computed), then FAIL applies the outcomes. The event
# loop's nack of one task reads without the lock and applies only what its read
# still holds for (READ_HELD_FOR_NACK_ONE, FAIL_ONE_IF_UNCHANGED): two statements
# in autocommit instead of a transaction's four round trips.

# The nacked rows that are still held, with what the decision needs: their attempts, cancel
# request and the queue's backoff settings.
_HELD_FOR_NACK = f"""
WITH {{items}}
SELECT t.id, t.attempts, t.max_retries, q.retry_base_ms, q.retry_max_delay_ms, t.cancel_requested
FROM {{tasks}} JOIN tf_queue q ON q.id = t.queue_id
WHERE {_HELD}{{lock}}
"""

# A batch of items, as arrays, locked (in id order) for the transaction's FAIL.
LOCK_HELD_FOR_NACK = _HELD_FOR_NACK.format(
    items="""i AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::text[]) AS i(id, lease_token)
), i2 AS (SELECT i.*, %(worker_id)s::text AS worker_id FROM i)""",
    tasks="tf_task t JOIN i2 i ON t.id = i.id",
    lock="ORDER BY t.id\nFOR UPDATE OF t",
)

# One item, as plain parameters (a plan Postgres keeps, its task fenced as ACK_ONE's), not
# locked: FAIL_ONE_IF_UNCHANGED checks that what this read still stands when it applies.
READ_HELD_FOR_NACK_ONE = _HELD_FOR_NACK.format(
    items="""i AS (SELECT %(task_id)s::uuid AS id, %(lease_token)s::text AS lease_token,
                  %(worker_id)s::text AS worker_id)""",
    tasks=f"{columns.ONE_TASK_BY_ID} CROSS JOIN i",
    lock="",
)

# Lock one batch of leases that ran out, oldest first; SKIP LOCKED lets several watchdogs share the work.
LOCK_EXPIRED = f"""
SELECT t.id, t.attempts, t.max_retries, q.retry_base_ms, q.retry_max_delay_ms, t.timeout_seconds,
       t.lease_expires_at >= {_TIME_LIMIT} AS timed_out, t.cancel_requested
FROM tf_task t JOIN tf_queue q ON q.id = t.queue_id
WHERE t.status IN ('claimed', 'executing') AND t.lease_expires_at <= now()
ORDER BY t.lease_expires_at
LIMIT %(limit)s
FOR UPDATE OF t SKIP LOCKED
"""

# Who held the expired leases: the error message names the worker that went silent.
LEASE_HOLDERS = """
SELECT id, claimed_by FROM tf_task WHERE id = ANY(%(task_ids)s)
"""

# Apply the decided outcome (retry with its delay, dead with a DLQ entry, or cancelled
# when a cancel was requested) to the rows ``old`` finds, each decision a row of ``d``.
_FAIL = f"""
WITH {{decisions}}, old AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at
    FROM {{tasks}}
    WHERE {{guard}}
), moved AS (
    -- A released task (handed back unstarted) gets its attempt back and keeps its last real error.
    UPDATE tf_task t
    SET status = d.outcome, updated_at = now(), status_changed_at = now(),
        last_error = CASE WHEN d.released THEN t.last_error ELSE d.error END,
        attempts = t.attempts - CASE WHEN d.released THEN 1 ELSE 0 END,
        lease_expires_at = NULL, finished_at = CASE WHEN d.outcome = 'cancelled' THEN now() ELSE t.finished_at END,
        scheduled_at = CASE WHEN d.outcome = 'retry'
                            THEN now() + d.delay_ms * interval '1 millisecond'
                            ELSE t.scheduled_at END
    FROM d JOIN old ON old.id = d.id
    WHERE t.id = d.id
    RETURNING {_TASK_COLUMNS}, old.from_status, old.from_changed_at,
              %(event_worker)s::text AS event_worker, d.released,
              CASE WHEN d.released THEN '{decide.RELEASED_DETAIL_PREFIX}' || d.error ELSE d.error END AS event_detail
), dead AS (
    INSERT INTO tf_dead_letter (id, queue_id, payload, last_error, attempts, died_at, replay_count)
    SELECT m.id, m.queue_id, m.payload, m.last_error, m.attempts, now(), 0
    FROM moved m WHERE m.status = 'dead'
    ON CONFLICT (id) DO UPDATE
    SET payload = excluded.payload, last_error = excluded.last_error,
        attempts = excluded.attempts, died_at = excluded.died_at
)
{_RECORD_EVENTS}
"""

# Decisions as arrays, for rows this transaction has locked (LOCK_HELD_FOR_NACK, LOCK_EXPIRED).
# The status guard is repeated so the statement is safe on its own.
FAIL = _FAIL.format(
    decisions="""d AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(outcomes)s::text[], %(delays_ms)s::bigint[],
                         %(errors)s::text[], %(released)s::boolean[])
        AS d(id, outcome, delay_ms, error, released)
)""",
    tasks="tf_task t JOIN d ON d.id = t.id",
    guard="t.status IN ('claimed', 'executing')",
)

# One decision made from READ_HELD_FOR_NACK_ONE's unlocked read, applied in autocommit only
# if the lease is still held and what the decision read still stands (attempts, the retry
# limit, the cancel request): ``old`` locks the row, and a row another move changed in the
# meantime is checked again in its new version (READ COMMITTED's recheck of a locked row), so
# a cancel requested or a lease lost after the read makes the statement move nothing. The
# caller then runs the nack again on the thread path, which decides under its lock.
FAIL_ONE_IF_UNCHANGED = _FAIL.format(
    decisions="""d AS (
    SELECT %(task_id)s::uuid AS id, %(outcome)s::text AS outcome, %(delay_ms)s::bigint AS delay_ms,
           %(error)s::text AS error, %(release)s::boolean AS released, %(worker_id)s::text AS worker_id,
           %(lease_token)s::text AS lease_token, %(attempts)s::int AS attempts,
           %(max_retries)s::int AS max_retries, %(cancel_requested)s::boolean AS cancel_requested
)""",
    tasks=f"{columns.ONE_TASK_BY_ID} CROSS JOIN d i",
    guard=f"""{_HELD.strip()}
        AND t.attempts = i.attempts AND t.max_retries = i.max_retries
        AND t.cancel_requested = i.cancel_requested
    FOR UPDATE OF t""",
)


# --- scheduler and operators: retry -> pending --------------------------------------------------

# Move retry tasks due within the horizon back to pending, keeping their
# scheduled_at (claimable exactly when the backoff ends); SKIP LOCKED so
# several schedulers share the work.
PROMOTE_DUE = f"""
WITH old AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at
    FROM tf_task t
    WHERE t.status = 'retry' AND t.scheduled_at <= now() + make_interval(secs => %(horizon)s)
    ORDER BY t.scheduled_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE tf_task t SET status = 'pending', updated_at = now(), status_changed_at = now()
    FROM old WHERE t.id = old.id
    RETURNING {_TASK_COLUMNS}, old.from_status, old.from_changed_at,
              NULL::text AS event_worker, NULL::text AS event_detail
)
{_RECORD_EVENTS}
"""

# An operator's "retry now": the given retry tasks skip the rest of their backoff.
# Unlike a promotion, scheduled_at becomes now(), so the task is claimable at once.
RETRY_NOW = f"""
WITH old AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at
    FROM tf_task t
    WHERE t.status = 'retry' AND t.id = ANY(%(task_ids)s)
    ORDER BY t.id
    FOR UPDATE
), moved AS (
    UPDATE tf_task t
    SET status = 'pending', scheduled_at = now(), updated_at = now(), status_changed_at = now()
    FROM old WHERE t.id = old.id
    RETURNING {_TASK_COLUMNS}, old.from_status, old.from_changed_at,
              NULL::text AS event_worker, %(detail)s::text AS event_detail
)
{_RECORD_EVENTS}
"""


# --- producers and operators: cancel, replay, discard ---------------------------------------------

# Cancel pending and retry tasks of one queue; the hole narrows it to one task or none.
_CANCEL = f"""
WITH old AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at
    FROM tf_task t
    WHERE t.queue_id = %(queue_id)s AND t.status IN ('pending', 'retry') {{id_filter}}
    ORDER BY t.id
    FOR UPDATE OF t
), moved AS (
    UPDATE tf_task t
    SET status = 'cancelled', finished_at = now(), updated_at = now(), status_changed_at = now()
    FROM old WHERE t.id = old.id
    RETURNING {_TASK_COLUMNS}, old.from_status, old.from_changed_at,
              NULL::text AS event_worker, %(detail)s::text AS event_detail
)
{_RECORD_EVENTS}
"""

# A producer cancels one task (DELETE /queues/{name}/tasks/{id}): nothing moves unless it is pending or retry.
CANCEL_ONE = _CANCEL.format(id_filter="AND t.id = %(task_id)s")
# (Purge cancels a queue's tasks in bounded batches: bulk_statements.PURGE_BATCH.)

# Put dead tasks of one queue back to pending with a fresh attempt budget and
# count the replay on their DLQ entry; the hole picks which dead tasks.
_REPLAY = f"""
WITH old AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at
    FROM tf_task t JOIN tf_dead_letter d ON d.id = t.id
    WHERE t.queue_id = %(queue_id)s AND t.status = 'dead' {{id_filter}}
    ORDER BY t.id
    LIMIT %(limit)s
    FOR UPDATE OF t
), moved AS (
    UPDATE tf_task t
    SET status = 'pending', attempts = 0, scheduled_at = now(), updated_at = now(),
        status_changed_at = now(), claimed_by = NULL, claimed_at = NULL, heartbeat_at = NULL,
        lease_token = NULL, lease_expires_at = NULL
    FROM old WHERE t.id = old.id
    RETURNING {_TASK_COLUMNS}, old.from_status, old.from_changed_at,
              NULL::text AS event_worker, %(detail)s::text AS event_detail
), replayed AS (
    UPDATE tf_dead_letter d SET replayed_at = now(), replay_count = d.replay_count + 1
    FROM moved m WHERE d.id = m.id
)
{_RECORD_EVENTS}
"""

# Replay one dead task by id.
REPLAY_ONE = _REPLAY.format(id_filter="AND t.id = %(task_id)s")
# Replay one batch of the given dead tasks (the caller loops until a batch comes back short).
REPLAY_SOME = _REPLAY.format(id_filter="AND t.id = ANY(%(task_ids)s)")
# Replay one batch of the queue's dead tasks, whichever they are.
REPLAY_ALL = _REPLAY.format(id_filter="")

# Remove dead tasks for good with their DLQ entries and history; tasks that are
# not dead (a replay got there first) are skipped by the lock's guard. Locked in
# id order, as replay locks them, so a discard and a bulk replay never deadlock.
DISCARD = """
WITH doomed AS (
    SELECT t.id FROM tf_task t JOIN tf_dead_letter d ON d.id = t.id
    WHERE t.queue_id = %(queue_id)s AND t.status = 'dead' AND t.id = ANY(%(task_ids)s)
    ORDER BY t.id
    FOR UPDATE OF t
), gone_letters AS (
    DELETE FROM tf_dead_letter WHERE id IN (SELECT id FROM doomed)
), gone_events AS (
    DELETE FROM tf_task_event WHERE task_id IN (SELECT id FROM doomed)
)
DELETE FROM tf_task WHERE id IN (SELECT id FROM doomed) RETURNING id
"""


# --- queue deletion and retention -------------------------------------------------------------

# Tasks that keep a queue from being deleted: anything not finished (done or cancelled).
COUNT_BLOCKING = """
SELECT count(*) AS n FROM tf_task
WHERE queue_id = %(queue_id)s AND status IN ('pending', 'claimed', 'executing', 'retry', 'dead')
"""

# A request is about to wait for the task's result: from now on the move that
# settles it returns ``awaited`` true and rings its bell (queues.lifecycle.notify).
# Written only once, and never on a task already settled: that one is answered at once.
MARK_AWAITED = """
UPDATE tf_task SET awaited = true
WHERE id = %(task_id)s AND NOT awaited AND status NOT IN ('done', 'dead', 'cancelled')
"""

# Deleting a queue, last step: what is left of its history, DLQ entries and
# tasks (the bulk went in bounded batches: bulk_statements), while the caller
# holds the queue row's lock (the queue row itself goes last, through the ORM).
DELETE_QUEUE_EVENTS = "DELETE FROM tf_task_event WHERE queue_id = %(queue_id)s"
DELETE_QUEUE_DEAD_LETTERS = "DELETE FROM tf_dead_letter WHERE queue_id = %(queue_id)s"
DELETE_QUEUE_TASKS = "DELETE FROM tf_task WHERE queue_id = %(queue_id)s"

# Delete one batch of done/cancelled tasks past the retention period; SKIP LOCKED
# so a busy row waits for the next round. Their history is not deleted row by row:
# no event is later than its task's finish, so each goes with its day's partition
# of tf_task_event, dropped whole within a day (queues.partitions).
PRUNE_FINISHED = """
WITH doomed AS (
    SELECT t.id FROM tf_task t
    WHERE t.status IN ('done', 'cancelled') AND t.finished_at < now() - make_interval(days => %(days)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone_letters AS (
    DELETE FROM tf_dead_letter WHERE id IN (SELECT id FROM doomed)
)
DELETE FROM tf_task WHERE id IN (SELECT id FROM doomed) RETURNING id
"""


#: Every named statement, name -> SQL, in the order above, then the claim ones
#: (``queues.lifecycle.claim_statements``), the bulk ones
#: (``queues.lifecycle.bulk_statements``), ``cancel_statements`` and ``read_statements``,
#: for EXPLAIN tests and benchmarks.
ALL: dict[str, str] = {
    **{
        name: value
        for name, value in dict(globals()).items()
        if name.isupper() and not name.startswith("_") and isinstance(value, str)
    },
    **claim_statements.ALL,
    **bulk_statements.ALL,
    **cancel_statements.ALL,
    **read_statements.ALL,
}
