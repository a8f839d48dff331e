"""The one owner of task status.

Every transition of ``queues.models.ALLOWED_TRANSITIONS`` happens here, as one
guarded SQL statement (``UPDATE ... WHERE status IN (...) AND claimed_by = ...``
joined to a ``SELECT ... FOR UPDATE``), which also writes the ``TaskEvent``
rows in the same statement. Two processes can therefore never both win a move,
and the history can never disagree with the task. Time always comes from
Postgres' ``now()``: a worker or loop with a skewed clock cannot expire a
healthy lease.

After the commit each move is reported to ``queues.telemetry.observe`` (JSON log line,
metrics) and ready tasks are announced to ``queues.dispatch`` (Redis lanes,
long-poll wakeups), so a crash between the two loses nothing: Redis is
re-derived from Postgres by the loops.

Functions return task rows as dicts (column name -> value), which the API
renders directly; the hot paths never build model instances.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import psycopg
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from psycopg.errors import ForeignKeyViolation
from psycopg.pq import Format
from psycopg.types.json import Jsonb

from queues.backoff import backoff_ms
from queues.dispatch import announce
from queues.errors import (
    IdempotencyConflict,
    InvalidTransition,
    LeaseLost,
    QueueNotEmpty,
    QueueNotFound,
    TaskNotFound,
)
from queues.models import Queue, Status
from queues.telemetry import observe
from taskforge.ops.failpoints import failpoint

Row = dict[str, Any]

# The columns every statement returns for a task (tf_task has no others).
_TASK_COLUMNS = """
    t.id, t.queue_id, t.payload, t.status, t.priority, t.scheduled_at, t.created_at, t.updated_at,
    t.status_changed_at, t.claimed_at, t.claimed_by, t.heartbeat_at, t.lease_token,
    t.lease_expires_at, t.attempts, t.max_retries, t.last_error, t.result, t.finished_at,
    t.idempotency_key, t.request_fingerprint
"""

# Appended to a data-modifying CTE named ``moved`` (with ``from_status`` and
# ``worker_id`` columns): records one history row per moved task.
_RECORD_EVENTS = """
, events AS (
    INSERT INTO tf_task_event (task_id, queue_id, kind, at, from_status, to_status, worker_id, detail)
    SELECT m.id, m.queue_id, %(event_kind)s, now(), m.from_status, m.status, m.event_worker, m.event_detail
    FROM moved m
)
SELECT m.*,
       extract(epoch FROM now() - m.from_changed_at) * 1000 AS duration_ms,
       extract(epoch FROM now() - m.claimed_at) AS execution_seconds
FROM moved m
"""


# Django's psycopg setup hands jsonb back as text (JSONField parses it); raw
# statements parse these columns themselves.
_JSON_COLUMNS = frozenset({"payload", "result"})


# psycopg's C loader for timestamptz. Django installs a pure-Python one (to pin
# the tzinfo); ours returns the same UTC datetimes about 6x faster, and a
# 100-task batch returns some 1,000 of them (make bench: 14% of a batch enqueue).
_TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid
_FAST_TIMESTAMPTZ = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, Format.TEXT)


def _rows(sql: str, params: dict[str, Any] | Sequence[Any]) -> list[Row]:
    with connection.cursor() as cursor:
        if connection.timezone_name == "UTC":  # what settings.TIME_ZONE pins
            cursor.cursor.adapters.register_loader(_TIMESTAMPTZ_OID, _FAST_TIMESTAMPTZ)
        cursor.execute(sql, params)
        if cursor.description is None:
            return []
        names = [column.name for column in cursor.description]
        rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    json_columns = _JSON_COLUMNS.intersection(names)
    for row in rows:
        for name in json_columns:
            if isinstance(row[name], str):
                row[name] = orjson.loads(row[name])
    return rows


def _after_commit(moved: list[Row]) -> None:
    """Report moves once they are durable (never for a rolled-back move).

    Register it after any ``dispatch.announce`` of the same moves: on-commit
    hooks run in order, and waiting workers should hear first, logs and
    metrics can follow.
    """
    if moved:
        transaction.on_commit(lambda: observe.transitions(moved))


# --- enqueue --------------------------------------------------------------------


@dataclass(frozen=True)
class NewTask:
    payload: dict[str, Any]
    priority: int = 5
    scheduled_at: datetime | None = None
    idempotency_key: str | None = None
    max_retries: int | None = None
    fingerprint: str | None = None


def fingerprint(body: dict[str, Any]) -> str:
    """A stable hash of an enqueue body: same key + same body = a replay."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


_ENQUEUE = f"""
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(payloads)s::jsonb[], %(priorities)s::smallint[],
                         %(scheduled)s::timestamptz[], %(keys)s::text[], %(retries)s::smallint[],
                         %(prints)s::text[], %(ords)s::int[])
        AS i(id, payload, priority, scheduled_at, idempotency_key, max_retries, fingerprint, ord)
), moved AS (
    INSERT INTO tf_task AS t (id, queue_id, payload, status, priority, scheduled_at, created_at,
                              updated_at, status_changed_at, attempts, max_retries,
                              idempotency_key, request_fingerprint)
    SELECT i.id, %(queue_id)s, i.payload, 'pending', i.priority,
           greatest(coalesce(i.scheduled_at, now()), now()), now(), now(), now(), 0,
           coalesce(i.max_retries, %(queue_max_retries)s), i.idempotency_key, i.fingerprint
    FROM input i ORDER BY i.ord
    ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING {_TASK_COLUMNS}, NULL::text AS from_status, now() AS from_changed_at,
              NULL::text AS event_worker, NULL::text AS event_detail
)
{_RECORD_EVENTS}
"""


def enqueue(queue: Queue, items: Sequence[NewTask]) -> list[tuple[Row, bool]]:
    """Create tasks; return ``(task, created)`` per item, in order.

    1. One multi-row INSERT; an ``idempotency_key`` that already exists in the
       queue is skipped by ``ON CONFLICT DO NOTHING`` (which waits for a
       concurrent insert of the same key to commit, so exactly one wins).
    2. Skipped items are answered with the existing task, or a 409 when the
       key was used with another body. The whole call is one transaction.
    """
    try:
        return _enqueue(queue, items)
    except IntegrityError as exc:
        # The queue row came from a per-process copy (queues.api.lookups) and was deleted
        # since; the foreign key is checked at commit.
        if isinstance(exc.__cause__, ForeignKeyViolation):
            raise QueueNotFound(queue.name) from None
        raise


def _enqueue(queue: Queue, items: Sequence[NewTask]) -> list[tuple[Row, bool]]:
    keys = [item.idempotency_key for item in items if item.idempotency_key is not None]
    ids = [uuid.uuid4() for _ in items]
    with transaction.atomic():
        inserted = _rows(
            _ENQUEUE,
            {
                "ids": ids,
                "payloads": [Jsonb(item.payload, dumps=_dumps) for item in items],
                "priorities": [item.priority for item in items],
                "scheduled": [item.scheduled_at for item in items],
                "keys": [item.idempotency_key for item in items],
                "retries": [item.max_retries for item in items],
                "prints": [item.fingerprint for item in items],
                "ords": list(range(len(items))),
                "queue_id": queue.id,
                "queue_max_retries": queue.max_retries,
                "event_kind": "transition",
            },
        )
        by_key = {row["idempotency_key"]: row for row in inserted if row["idempotency_key"]}
        existing: dict[str, Row] = {}
        if len(by_key) < len(keys):
            missing = [key for key in keys if key not in by_key]
            for row in _rows(
                f"SELECT {_TASK_COLUMNS} FROM tf_task t WHERE t.queue_id = %s AND t.idempotency_key = ANY(%s)",
                [queue.id, missing],
            ):
                existing[row["idempotency_key"]] = row
        results: list[tuple[Row, bool]] = []
        # Matched by the ids we chose, not by position: RETURNING's order is not promised.
        fresh = {row["id"]: row for row in inserted}
        for item, task_id in zip(items, ids, strict=True):
            key = item.idempotency_key
            if task_id in fresh:
                results.append((fresh[task_id], True))
                continue
            found = existing.get(key) if key is not None else None
            if found is None or found["request_fingerprint"] != item.fingerprint:
                raise IdempotencyConflict(key or "")
            results.append((found, False))
        if inserted:
            transaction.on_commit(lambda: announce.announce(queue, inserted))
        _after_commit(inserted)
    failpoint("enqueue.after_commit")
    return results


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


# --- claim ----------------------------------------------------------------------

# The one hand-written claim. Picks due pending tasks of the given queues in
# priority order (the partial index tf_task_ready holds only pending rows),
# skipping rows another claimer holds, and leases them in the same statement.
_CLAIM = f"""
WITH picked AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at
    FROM {{source}}
    WHERE {{queue_filter}} AND t.status = 'pending' AND t.scheduled_at <= now()
    ORDER BY t.priority, t.scheduled_at
    LIMIT %(limit)s
    FOR UPDATE OF t SKIP LOCKED
), moved AS (
    UPDATE tf_task t
    SET status = 'claimed', claimed_at = now(), claimed_by = %(worker_id)s, heartbeat_at = NULL,
        lease_token = replace(gen_random_uuid()::text, '-', ''),
        lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
        attempts = t.attempts + 1, status_changed_at = now(), updated_at = now()
    FROM picked p
    WHERE t.id = p.id
    RETURNING {_TASK_COLUMNS}, p.from_status, p.from_changed_at,
              t.claimed_by AS event_worker, NULL::text AS event_detail
)
{_RECORD_EVENTS}
ORDER BY m.priority, m.scheduled_at
"""


# Ids from the Redis lanes drive the claim: a primary-key lookup per id. A plain
# ``t.id = ANY(...)`` filter, or a plain join, let the planner walk the ready
# index over every due pending row of the queue to honour ORDER BY, and hash them
# (2-3 ms at a 10,000-task backlog, as soon as the statistics lag behind a burst
# of enqueues); the subquery with OFFSET 0 is a fence that keeps one index probe
# per id (0.2 ms).
_CLAIM_BY_ID_SOURCE = """unnest(%(task_ids)s::uuid[]) AS wanted(id)
    CROSS JOIN LATERAL (SELECT * FROM tf_task x WHERE x.id = wanted.id AND x.status = 'pending' OFFSET 0) t"""
# One queue is compared with "=": the ordered scan of tf_task_ready then stops at
# the LIMIT. "= ANY" (several queues) reads every due row of them and sorts.
_ONE_QUEUE = "t.queue_id = %(queue_id)s"
_SOME_QUEUES = "t.queue_id = ANY(%(queue_ids)s)"


def claim(
    worker_id: str,
    queue_ids: Sequence[uuid.UUID],
    limit: int,
    *,
    task_ids: Sequence[uuid.UUID] | None = None,
) -> list[Row]:
    """Lease up to ``limit`` due pending tasks of ``queue_ids`` to ``worker_id``.

    With ``task_ids`` (from the Redis ready lanes) only those rows are
    candidates: a claim by primary key. Ids that are no longer pending or due
    are simply not returned.
    """
    if not queue_ids or limit <= 0:
        return []
    sql = _CLAIM.replace("{source}", _CLAIM_BY_ID_SOURCE if task_ids is not None else "tf_task t")
    sql = sql.replace("{queue_filter}", _ONE_QUEUE if len(queue_ids) == 1 else _SOME_QUEUES)
    with transaction.atomic():
        moved = _rows(
            sql,
            {
                "queue_id": queue_ids[0],
                "queue_ids": list(queue_ids),
                "task_ids": list(task_ids or []),
                "limit": limit,
                "worker_id": worker_id,
                "lease_seconds": settings.TASKFORGE_HEARTBEAT_TIMEOUT,
                "event_kind": "transition",
            },
        )
        _after_commit(moved)
    if moved:
        failpoint("claim.after_commit")
    return moved


# --- heartbeat, ack ----------------------------------------------------------------

# A lease is held by (claimed_by, lease_token) while the task is claimed or
# executing and the lease has not expired: an expired lease is lost even
# before the watchdog gets to it, so a paused worker can never finish a task
# that may already be running elsewhere.
_HELD = """
    t.status IN ('claimed', 'executing') AND t.claimed_by = i.worker_id
    AND (i.lease_token IS NULL OR t.lease_token = i.lease_token) AND t.lease_expires_at > now()
"""

_HEARTBEAT = f"""
WITH i AS (SELECT %(task_id)s::uuid AS id, %(worker_id)s::text AS worker_id, %(lease_token)s::text AS lease_token),
held AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at
    FROM tf_task t JOIN i ON t.id = i.id WHERE {_HELD} FOR UPDATE OF t
), moved AS (
    UPDATE tf_task t
    SET status = 'executing', heartbeat_at = now(), updated_at = now(),
        lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
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
SELECT m.*, extract(epoch FROM now() - m.from_changed_at) * 1000 AS duration_ms,
       extract(epoch FROM now() - m.claimed_at) AS execution_seconds
FROM moved m
"""


def heartbeat(task_id: uuid.UUID, *, worker_id: str, lease_token: str | None = None) -> Row:
    """Extend the lease; the first heartbeat moves ``claimed`` to ``executing``."""
    with transaction.atomic():
        moved = _rows(
            _HEARTBEAT,
            {
                "task_id": task_id,
                "worker_id": worker_id,
                "lease_token": lease_token,
                "lease_seconds": settings.TASKFORGE_HEARTBEAT_TIMEOUT,
            },
        )
        if not moved:
            raise _not_held(task_id)
        _after_commit([row for row in moved if row["from_status"] == Status.CLAIMED])
    return moved[0]


@dataclass(frozen=True)
class AckItem:
    task_id: uuid.UUID
    lease_token: str | None = None
    result: dict[str, Any] | None = None


_ACK = f"""
WITH i AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::text[], %(results)s::jsonb[])
        AS i(id, lease_token, result)
), i2 AS (SELECT i.*, %(worker_id)s::text AS worker_id FROM i),
held AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at, i.result
    FROM tf_task t JOIN i2 i ON t.id = i.id WHERE {_HELD}
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


def ack_many(worker_id: str, items: Sequence[AckItem]) -> list[Row | DomainErrorT]:
    """Ack several tasks in one statement; each item is judged alone.

    Returns, in order, the task row or the error (``TaskNotFound`` /
    ``LeaseLost``) for that item. Repeating an ack that already succeeded
    (same worker, same lease) returns the task unchanged.
    """
    with transaction.atomic():
        moved = _rows(
            _ACK,
            {
                "ids": [item.task_id for item in items],
                "tokens": [item.lease_token for item in items],
                "results": [None if item.result is None else Jsonb(item.result, dumps=_dumps) for item in items],
                "worker_id": worker_id,
                "event_kind": "transition",
            },
        )
        _after_commit(moved)
    if moved:
        failpoint("ack.after_commit")
    done = {row["id"]: row for row in moved}
    missing = [item for item in items if item.task_id not in done]
    if missing:
        current = _current([item.task_id for item in missing])
        for item in missing:
            row = current.get(item.task_id)
            if (
                row is not None
                and row["status"] == Status.DONE
                and row["claimed_by"] == worker_id
                and (item.lease_token is None or row["lease_token"] == item.lease_token)
            ):
                done[item.task_id] = row  # an idempotent repeat
    return [done.get(item.task_id) or _not_held(item.task_id) for item in items]


def ack(
    task_id: uuid.UUID, *, worker_id: str, lease_token: str | None = None, result: dict[str, Any] | None = None
) -> Row:
    (outcome,) = ack_many(worker_id, [AckItem(task_id, lease_token, result)])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


# --- failures: nack and lease expiry ------------------------------------------------


@dataclass(frozen=True)
class NackItem:
    task_id: uuid.UUID
    error: str
    lease_token: str | None = None
    retry: bool = True
    retry_after_seconds: int | None = None


# Lock the rows that are still held, with what the backoff needs.
_LOCK_HELD_FOR_NACK = f"""
WITH i AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::text[]) AS i(id, lease_token)
), i2 AS (SELECT i.*, %(worker_id)s::text AS worker_id FROM i)
SELECT t.id, t.attempts, t.max_retries, q.retry_base_ms, q.retry_max_delay_ms
FROM tf_task t JOIN i2 i ON t.id = i.id JOIN tf_queue q ON q.id = t.queue_id
WHERE {_HELD}
ORDER BY t.id
FOR UPDATE OF t
"""

_LOCK_EXPIRED = """
SELECT t.id, t.attempts, t.max_retries, q.retry_base_ms, q.retry_max_delay_ms
FROM tf_task t JOIN tf_queue q ON q.id = t.queue_id
WHERE t.status IN ('claimed', 'executing') AND t.lease_expires_at <= now()
ORDER BY t.lease_expires_at
LIMIT %(limit)s
FOR UPDATE OF t SKIP LOCKED
"""

# Apply the decided outcome to rows this transaction has locked. The status
# guard is repeated so the statement is safe on its own.
_FAIL = f"""
WITH d AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(outcomes)s::text[], %(delays_ms)s::bigint[],
                         %(errors)s::text[])
        AS d(id, outcome, delay_ms, error)
), old AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at
    FROM tf_task t JOIN d ON d.id = t.id
    WHERE t.status IN ('claimed', 'executing')
), moved AS (
    UPDATE tf_task t
    SET status = d.outcome, last_error = d.error, updated_at = now(), status_changed_at = now(),
        lease_expires_at = NULL,
        scheduled_at = CASE WHEN d.outcome = 'retry'
                            THEN now() + d.delay_ms * interval '1 millisecond'
                            ELSE t.scheduled_at END
    FROM d JOIN old ON old.id = d.id
    WHERE t.id = d.id
    RETURNING {_TASK_COLUMNS}, old.from_status, old.from_changed_at,
              %(event_worker)s::text AS event_worker, d.error AS event_detail
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


def _decide(locked: list[Row], wants: dict[uuid.UUID, NackItem] | None, error: str | None) -> dict[str, list[Any]]:
    """Per locked row: retry (with its delay) or dead, by the contract's rules."""
    ids, outcomes, delays, errors = [], [], [], []
    for row in locked:
        item = wants[row["id"]] if wants else None
        out_of_attempts = row["attempts"] >= 1 + row["max_retries"]
        wants_retry = item.retry if item else True
        if out_of_attempts or not wants_retry:
            outcome, delay = Status.DEAD, 0
        elif item and item.retry_after_seconds is not None:
            outcome, delay = Status.RETRY, item.retry_after_seconds * 1000
        else:
            # attempts counts the failed attempt just made: retry n = attempts - 1.
            outcome = Status.RETRY
            delay = backoff_ms(row["attempts"] - 1, row["retry_base_ms"], row["retry_max_delay_ms"])
        ids.append(row["id"])
        outcomes.append(str(outcome))
        delays.append(delay)
        errors.append(item.error if item else error)
    return {"ids": ids, "outcomes": outcomes, "delays_ms": delays, "errors": errors}


def nack_many(worker_id: str, items: Sequence[NackItem]) -> list[Row | DomainErrorT]:
    """Fail several held tasks; each item is judged alone, results in order."""
    wants = {item.task_id: item for item in items}
    with transaction.atomic():
        locked = _rows(
            _LOCK_HELD_FOR_NACK,
            {
                "ids": [item.task_id for item in items],
                "tokens": [item.lease_token for item in items],
                "worker_id": worker_id,
            },
        )
        moved = (
            _rows(_FAIL, {**_decide(locked, wants, None), "event_worker": worker_id, "event_kind": "transition"})
            if locked
            else []
        )
        _after_commit(moved)
    by_id = {row["id"]: row for row in moved}
    return [by_id.get(item.task_id) or _not_held(item.task_id) for item in items]


def nack(
    task_id: uuid.UUID,
    *,
    worker_id: str,
    error: str,
    lease_token: str | None = None,
    retry: bool = True,
    retry_after_seconds: int | None = None,
) -> Row:
    (outcome,) = nack_many(worker_id, [NackItem(task_id, error, lease_token, retry, retry_after_seconds)])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


LEASE_EXPIRED_ERROR = "lease expired: no heartbeat within {timeout}s (worker {worker})"


def expire_leases(limit: int = 500) -> int:
    """Fail every task whose lease ran out (a failed attempt). Returns how many."""
    with transaction.atomic():
        locked = _rows(_LOCK_EXPIRED, {"limit": limit})
        if not locked:
            return 0
        holders = {
            row["id"]: row["claimed_by"]
            for row in _rows("SELECT id, claimed_by FROM tf_task WHERE id = ANY(%s)", [[r["id"] for r in locked]])
        }
        decided = _decide(locked, None, None)
        decided["errors"] = [
            LEASE_EXPIRED_ERROR.format(timeout=settings.TASKFORGE_HEARTBEAT_TIMEOUT, worker=holders[task_id])
            for task_id in decided["ids"]
        ]
        moved = _rows(_FAIL, {**decided, "event_worker": None, "event_kind": "transition"})
        for row in moved:
            row["expired"] = True
        _after_commit(moved)
    failpoint("watchdog.after_expire")
    return len(moved)


# --- scheduler: promote due retries -------------------------------------------------

_PROMOTE = f"""
WITH old AS (
    SELECT t.id, t.status AS from_status, t.status_changed_at AS from_changed_at
    FROM tf_task t
    WHERE t.status = 'retry' AND t.scheduled_at <= now() + make_interval(secs => %(horizon)s)
    {{id_filter}}
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


def promote_due(limit: int = 1000, *, horizon_seconds: float = 0.0) -> list[Row]:
    """Move ``retry`` tasks due within ``horizon_seconds`` back to ``pending``.

    A promoted task keeps its ``scheduled_at``, so it is claimable exactly when
    its backoff ends and not before: promoting slightly early only moves it
    into the ready set in time.
    """
    with transaction.atomic():
        moved = _rows(
            _PROMOTE.replace("{id_filter}", ""),
            {"limit": limit, "horizon": horizon_seconds, "event_kind": "transition"},
        )
        transaction.on_commit(lambda: _announce_by_queue(moved))
        _after_commit(moved)
    return moved


# An operator's "retry now": the given retry tasks skip the rest of their backoff.
# Unlike a promotion, scheduled_at becomes now(), so the task is claimable at once.
_RETRY_NOW = f"""
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


def retry_now(task_ids: Sequence[uuid.UUID], *, actor: str | None = None) -> list[Row]:
    """Move the given ``retry`` tasks to ``pending`` now; tasks in other states are skipped."""
    with transaction.atomic():
        moved = _rows(
            _RETRY_NOW,
            {
                "task_ids": list(task_ids),
                "detail": f"retried now by {actor}" if actor else "retried now",
                "event_kind": "transition",
            },
        )
        transaction.on_commit(lambda: _announce_by_queue(moved))
        _after_commit(moved)
    return moved


# --- producer and operator moves: cancel, purge, replay, discard --------------------

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


def cancel(queue: Queue, task_id: uuid.UUID) -> Row:
    with transaction.atomic():
        moved = _rows(
            _CANCEL.replace("{id_filter}", "AND t.id = %(task_id)s"),
            {"queue_id": queue.id, "task_id": task_id, "detail": "cancelled", "event_kind": "transition"},
        )
        if not moved:
            current = get_task(queue, task_id)
            raise InvalidTransition(
                f"task {task_id} is {current['status']}; only pending and retry tasks can be cancelled"
            )
        _after_commit(moved)
    return moved[0]


def purge(queue: Queue) -> int:
    """Cancel every pending and retry task of the queue."""
    with transaction.atomic():
        moved = _rows(
            _CANCEL.replace("{id_filter}", ""),
            {"queue_id": queue.id, "detail": "purged", "event_kind": "transition"},
        )
        _after_commit(moved)
    return len(moved)


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


def replay(queue: Queue, task_id: uuid.UUID, *, actor: str | None = None) -> Row:
    """Put one dead task back to pending with a fresh attempt budget."""
    with transaction.atomic():
        moved = _rows(
            _REPLAY.replace("{id_filter}", "AND t.id = %(task_id)s"),
            {
                "queue_id": queue.id,
                "task_id": task_id,
                "limit": 1,
                "detail": _replay_detail(actor),
                "event_kind": "transition",
            },
        )
        if not moved:
            if not _dead_letter_exists(queue, task_id):
                raise TaskNotFound(task_id)
            raise InvalidTransition(f"task {task_id} is not dead; only dead tasks can be replayed")
        transaction.on_commit(lambda: announce.announce(queue, moved))
        _after_commit(moved)
    return moved[0]


def replay_many(
    queue: Queue, task_ids: Iterable[uuid.UUID] | None = None, *, actor: str | None = None, batch: int = 1000
) -> int:
    """Replay the given dead tasks (or all of the queue's); others are skipped."""
    total = 0
    ids = None if task_ids is None else list(task_ids)
    while True:
        with transaction.atomic():
            moved = _rows(
                _REPLAY.replace("{id_filter}", "" if ids is None else "AND t.id = ANY(%(task_ids)s)"),
                {
                    "queue_id": queue.id,
                    "task_ids": ids,
                    "limit": batch,
                    "detail": _replay_detail(actor),
                    "event_kind": "transition",
                },
            )
            if moved:
                transaction.on_commit(lambda moved=moved: announce.announce(queue, moved))
            _after_commit(moved)
        total += len(moved)
        if len(moved) < batch:  # replayed rows are no longer dead: each round takes new ones
            return total


def _replay_detail(actor: str | None) -> str:
    return f"replayed by {actor}" if actor else "replayed"


_DISCARD = """
WITH doomed AS (
    SELECT t.id FROM tf_task t JOIN tf_dead_letter d ON d.id = t.id
    WHERE t.queue_id = %(queue_id)s AND t.status = 'dead' AND t.id = ANY(%(task_ids)s)
    FOR UPDATE OF t
), gone_letters AS (
    DELETE FROM tf_dead_letter WHERE id IN (SELECT id FROM doomed)
), gone_events AS (
    DELETE FROM tf_task_event WHERE task_id IN (SELECT id FROM doomed)
)
DELETE FROM tf_task WHERE id IN (SELECT id FROM doomed) RETURNING id
"""


def discard(queue: Queue, task_id: uuid.UUID) -> None:
    """Remove a dead task and its DLQ entry for good."""
    if discard_many(queue, [task_id]) == 0:
        if not _dead_letter_exists(queue, task_id):
            raise TaskNotFound(task_id)
        raise InvalidTransition(f"task {task_id} is not dead; only dead tasks can be discarded")


def discard_many(queue: Queue, task_ids: Sequence[uuid.UUID]) -> int:
    with transaction.atomic():
        gone = _rows(_DISCARD, {"queue_id": queue.id, "task_ids": list(task_ids)})
    observe.discarded(queue, len(gone))
    return len(gone)


# --- queue deletion and retention ------------------------------------------------------

_BLOCKING = """
SELECT count(*) AS n FROM tf_task
WHERE queue_id = %s AND status IN ('pending', 'claimed', 'executing', 'retry', 'dead')
"""


def delete_queue(queue: Queue) -> None:
    """Delete a queue that holds only finished history (done, cancelled)."""
    with transaction.atomic():
        # Lock the queue row so no enqueue slips in between the check and the delete.
        locked = Queue.objects.select_for_update().filter(pk=queue.pk).first()
        if locked is None:
            return
        (blocking,) = _rows(_BLOCKING, [queue.id])
        if blocking["n"]:
            raise QueueNotEmpty(queue.name, blocking["n"])
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM tf_task_event WHERE queue_id = %s", [queue.id])
            cursor.execute("DELETE FROM tf_dead_letter WHERE queue_id = %s", [queue.id])
            cursor.execute("DELETE FROM tf_task WHERE queue_id = %s", [queue.id])
        locked.delete()
    transaction.on_commit(lambda: announce.forget(queue))


_PRUNE = """
WITH doomed AS (
    SELECT t.id FROM tf_task t
    WHERE t.status IN ('done', 'cancelled') AND t.finished_at < now() - make_interval(days => %(days)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone_letters AS (
    DELETE FROM tf_dead_letter WHERE id IN (SELECT id FROM doomed)
), gone_events AS (
    DELETE FROM tf_task_event WHERE task_id IN (SELECT id FROM doomed)
)
DELETE FROM tf_task WHERE id IN (SELECT id FROM doomed) RETURNING id
"""


def prune_finished(limit: int = 1000) -> int:
    """Delete one batch of done/cancelled tasks past the retention period."""
    with transaction.atomic():
        return len(_rows(_PRUNE, {"days": settings.TASKFORGE_RETENTION_DAYS, "limit": limit}))


# --- reads used by the moves above and the API ------------------------------------------


def get_task(queue: Queue, task_id: uuid.UUID) -> Row:
    rows = _rows(f"SELECT {_TASK_COLUMNS} FROM tf_task t WHERE t.id = %s AND t.queue_id = %s", [task_id, queue.id])
    if not rows:
        raise TaskNotFound(task_id)
    return rows[0]


def _current(task_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Row]:
    rows = _rows(f"SELECT {_TASK_COLUMNS} FROM tf_task t WHERE t.id = ANY(%s)", [list(task_ids)])
    return {row["id"]: row for row in rows}


def _not_held(task_id: uuid.UUID) -> Exception:
    exists = _rows("SELECT 1 FROM tf_task WHERE id = %s", [task_id])
    return LeaseLost(task_id) if exists else TaskNotFound(task_id)


def _dead_letter_exists(queue: Queue, task_id: uuid.UUID) -> bool:
    return bool(_rows("SELECT 1 FROM tf_dead_letter WHERE id = %s AND queue_id = %s", [task_id, queue.id]))


def _announce_by_queue(rows: list[Row]) -> None:
    by_queue: dict[uuid.UUID, list[Row]] = {}
    for row in rows:
        by_queue.setdefault(row["queue_id"], []).append(row)
    for queue_id, queue_rows in by_queue.items():
        announce.announce_ids(queue_id, queue_rows)


DomainErrorT = Exception
