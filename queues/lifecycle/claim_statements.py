"""Named statements of the claim: which due pending tasks a worker leases, in one statement each.

Four plain variants (where the rows come from: the ready index or the ids the
Redis lanes proposed; one queue or several), two that take the proposed ids
and top them up from the ready index, and the two of one queue for a single
proposed id, whose plan Postgres may keep. Callers pick a ready string
(``queues.lifecycle.lease.claim``); part of ``queues.lifecycle.statements.ALL``,
EXPLAINed by the tests with every other statement.
"""

from __future__ import annotations

from queues.lifecycle import columns

_TASK_COLUMNS = columns.TASK_COLUMNS
_RECORD_EVENTS = columns.RECORD_EVENTS

# The one hand-written pick: due pending tasks of the given queues in priority
# order (the partial index tf_task_ready holds only pending rows), skipping rows
# another claimer holds. Holes filled below at import: where the rows come from,
# which queues, and the extra condition of a top-up scan.
_PICK = """
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at
    FROM {source}
    WHERE {queue_filter} AND t.status = 'pending' AND t.scheduled_at <= now(){extra}
    ORDER BY t.priority, t.scheduled_at
    LIMIT {limit}
    FOR UPDATE OF t SKIP LOCKED
"""

# Leases the rows of a CTE named ``picked`` in the same statement, each through
# the primary key: the join condition is written as an array test, which the
# planner cannot hash or merge, so it probes the index once per picked row
# whatever it guessed of their number. As a plain ``t.id = p.id`` a LIMIT it
# cannot read (the top-up's below, or any LIMIT of the generic plan a prepared
# statement settles on) was guessed at a tenth of the queue's due rows, and for
# a few thousand it preferred reading all of tf_task (the backlog and every
# finished task still kept) and hashing it: 30-50 ms per claim at 80,000 tasks,
# growing with the table. (A second condition, ``t.id = ANY(ARRAY(SELECT id
# FROM picked))``, did the same for a large table, but an array of unknown
# length is guessed at 10 ids, and on a table just emptied it chose reading the
# table more often than the plain join: in quick CAP runs, two to five times the
# Postgres CPU per task.)
_LEASE = f"""
, moved AS (
    UPDATE tf_task t
    SET status = 'claimed', claimed_at = now(), claimed_by = %(worker_id)s, heartbeat_at = NULL,
        lease_token = replace(gen_random_uuid()::text, '-', ''),
        lease_expires_at = least(now() + make_interval(secs => %(lease_seconds)s),
                                 now() + make_interval(secs => t.timeout_seconds)),
        attempts = t.attempts + 1, status_changed_at = now(), updated_at = now()
    FROM picked p
    WHERE t.id = ANY(ARRAY[p.id])
    RETURNING {_TASK_COLUMNS}, p.from_status, p.from_changed_at,
              t.claimed_by AS event_worker, NULL::text AS event_detail
)
{_RECORD_EVENTS}
ORDER BY m.priority, m.scheduled_at
"""

# Without ids (the Postgres fallback) the claim scans the ready index itself.
_SCAN = "tf_task t"
# Ids from the Redis lanes drive the claim: a primary-key lookup per id. A plain
# ``t.id = ANY(...)`` filter, or a plain join, let the planner walk the ready
# index over every due pending row of the queue to honour ORDER BY, and hash them
# (2-3 ms at a 10,000-task backlog, as soon as the statistics lag behind a burst
# of enqueues); the subquery with OFFSET 0 is a fence that keeps one index probe
# per id (0.2 ms). It names the id alone (the claim's WHERE checks the status): with the
# status in it, stale statistics made the planner walk the partial ready index per id.
# Postgres plans this statement afresh on every run (the ids in plain sight make
# a plan for the ids at hand look cheaper than one kept for any), 0.3-0.5 ms of
# its CPU per claim, and that is kept: a kept plan is made for the table as it
# was at the connection's sixth claim, and one made on a nearly empty table (a
# new deployment, a bench after TRUNCATE) went on reading the whole table for
# every claim as the backlog grew, 18-230 ms each, until autovacuum's ANALYZE.
_BY_IDS = """unnest(%(task_ids)s::uuid[]) AS wanted(id)
    CROSS JOIN LATERAL (SELECT * FROM tf_task x WHERE x.id = wanted.id OFFSET 0) t"""
# A single proposed id, fenced the same way. Postgres plans the statements above
# afresh on every run, 0.3 ms of its CPU, as much as running them: a claim of one
# task paid it for one row (make bench's W3N, CALLS). With one id as a plain
# parameter, the plan it makes for any id costs what a plan for this one does, so
# from the sixth run on it keeps that plan and plans no more: 0.35-0.40 ms of
# Postgres CPU per claim of one task against 0.65-0.75 (2,000 claims in a row,
# alternating). A kept plan is only as good as the table it was made for: made on a
# nearly empty tf_task it reads the whole table (26 ms per claim at 50,000 tasks).
# So these run only on the event loop's connections, which never choose a
# sequential scan (taskforge.infra.postgres.aio); the thread path keeps the variants
# above, planned on every run.
_BY_ONE_ID = columns.ONE_TASK_BY_ID
# One queue is compared with "=": the ordered scan of tf_task_ready then stops at
# the LIMIT. "= ANY" (several queues) reads every due row of them and sorts.
_ONE_QUEUE = "t.queue_id = %(queue_id)s"
_SOME_QUEUES = "t.queue_id = ANY(%(queue_ids)s)"
_CLAIM_LIMIT = "%(limit)s"

_PICK_SCAN_ONE = _PICK.format(source=_SCAN, queue_filter=_ONE_QUEUE, extra="", limit=_CLAIM_LIMIT)
_PICK_SCAN_SOME = _PICK.format(source=_SCAN, queue_filter=_SOME_QUEUES, extra="", limit=_CLAIM_LIMIT)
_PICK_IDS_ONE = _PICK.format(source=_BY_IDS, queue_filter=_ONE_QUEUE, extra="", limit=_CLAIM_LIMIT)
_PICK_IDS_SOME = _PICK.format(source=_BY_IDS, queue_filter=_SOME_QUEUES, extra="", limit=_CLAIM_LIMIT)
_PICK_ONE_ID = _PICK.format(source=_BY_ONE_ID, queue_filter=_ONE_QUEUE, extra="", limit=_CLAIM_LIMIT)

# Claim from one queue by scanning its ready index: stops at the LIMIT.
CLAIM_FROM_ONE_QUEUE = "WITH picked AS (" + _PICK_SCAN_ONE + ")" + _LEASE
# Claim from several queues by scanning: reads their due rows and sorts (a worker serving many queues).
CLAIM_FROM_QUEUES = "WITH picked AS (" + _PICK_SCAN_SOME + ")" + _LEASE
# Claim the ids the Redis lane proposed, in one queue: one primary-key probe per id.
CLAIM_BY_IDS_FROM_ONE_QUEUE = "WITH picked AS (" + _PICK_IDS_ONE + ")" + _LEASE
# Claim proposed ids that may belong to any of several queues: still one probe per id.
CLAIM_BY_IDS_FROM_QUEUES = "WITH picked AS (" + _PICK_IDS_SOME + ")" + _LEASE
# Claim the one id the lane proposed, in one queue, with a plan Postgres may keep (event loop only).
CLAIM_BY_ONE_ID_FROM_ONE_QUEUE = "WITH picked AS (" + _PICK_ONE_ID + ")" + _LEASE

# The lanes held fewer ids than the claim wants: the proposed ids (of the
# ``queue_ids`` they came from) and, in the same statement, a scan of the
# ``scan_queue_id(s)`` for what they leave of the limit. One round trip where a
# claim in a trickle of tasks used to pay two (the ids, then a scan that mostly
# finds nothing); the scan leaves out the proposed ids, which its snapshot still
# sees as pending.
_TOP_UP = _PICK.format(
    source=_SCAN,
    queue_filter="{scan_filter}",
    extra="\n      AND t.id <> ALL(%(task_ids)s::uuid[])",
    limit="greatest(%(limit)s - (SELECT count(*) FROM proposed), 0)",
)
_TOPPED_UP = (
    "WITH proposed AS ({proposed}), scanned AS (" + _TOP_UP + "),"
    " picked AS (SELECT * FROM proposed UNION ALL SELECT * FROM scanned)" + _LEASE
)
_CLAIM_TOPPED_UP = _TOPPED_UP.replace("{proposed}", _PICK_IDS_SOME)
# Proposed ids, topped up from one queue's ready index (stops at the LIMIT).
CLAIM_BY_IDS_TOPPED_UP_FROM_ONE_QUEUE = _CLAIM_TOPPED_UP.format(scan_filter="t.queue_id = %(scan_queue_id)s")
# Proposed ids, topped up from several queues.
CLAIM_BY_IDS_TOPPED_UP_FROM_QUEUES = _CLAIM_TOPPED_UP.format(scan_filter="t.queue_id = ANY(%(scan_queue_ids)s)")
# The one id the lane proposed, topped up from its queue's ready index, with a plan Postgres may keep (event loop only).
CLAIM_BY_ONE_ID_TOPPED_UP_FROM_ONE_QUEUE = _TOPPED_UP.replace("{proposed}", _PICK_ONE_ID).format(
    scan_filter="t.queue_id = %(scan_queue_id)s"
)


#: This module's statements, name -> SQL (merged into ``statements.ALL``).
ALL: dict[str, str] = {
    name: value
    for name, value in dict(globals()).items()
    if name.isupper() and not name.startswith("_") and isinstance(value, str)
}
