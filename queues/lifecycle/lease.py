"""Workers' moves under a lease: claim, heartbeat, ack, nack, and the watchdog's expiry.

A lease is held by (worker id, lease token) until ``lease_expires_at``; every
move here is guarded on it inside its statement, so a worker that lost its
lease (expired, or the task was taken over) can never finish the task.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from psycopg.types.json import Jsonb

from queues.lifecycle import claim_statements, statements
from queues.lifecycle.decide import failed_attempt_outcome, is_repeated_ack, lease_expired_error, timed_out_error
from queues.lifecycle.notify import report_on_commit
from queues.lifecycle.reads import not_held, tasks_by_id
from queues.lifecycle.rows import DomainErrorT, Row, dumps_json, fetch_rows, lone_statement
from queues.models import Status
from taskforge.ops.failpoints import failpoint

# --- claim ----------------------------------------------------------------------------------


def claim(
    worker_id: str,
    queue_ids: Sequence[uuid.UUID],
    limit: int,
    *,
    task_ids: Sequence[uuid.UUID] | None = None,
    scan_queue_ids: Sequence[uuid.UUID] = (),
) -> list[Row]:
    """Lease up to ``limit`` due pending tasks of ``queue_ids`` to ``worker_id``.

    With ``task_ids`` (from the Redis ready lanes) only those rows are
    candidates: a claim by primary key. Ids that are no longer pending or due
    are simply not returned. With ``scan_queue_ids`` as well, what those ids
    leave of ``limit`` is scanned for in these queues by the same statement.
    """
    if not queue_ids or limit <= 0:
        return []
    with lone_statement():
        moved = fetch_rows(*claim_statement(worker_id, queue_ids, limit, task_ids, scan_queue_ids))
        report_on_commit(moved)
    if moved:
        failpoint("claim.after_commit")
    return moved


def claim_statement(
    worker_id: str,
    queue_ids: Sequence[uuid.UUID],
    limit: int,
    task_ids: Sequence[uuid.UUID] | None,
    scan_queue_ids: Sequence[uuid.UUID],
    *,
    plan_kept: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The claim statement that fits (see :func:`claim`) and its parameters: one definition for both paths.

    ``plan_kept``: the connection never chooses a sequential scan (the event
    loop's), so a single proposed id of one queue may take the form whose plan
    Postgres keeps (``claim_statements``: ``_BY_ONE_ID``).
    """
    one = len(queue_ids) == 1
    if plan_kept and one and task_ids is not None and len(task_ids) == 1 and set(scan_queue_ids) <= set(queue_ids):
        sql = (
            claim_statements.CLAIM_BY_ONE_ID_TOPPED_UP_FROM_ONE_QUEUE
            if scan_queue_ids
            else claim_statements.CLAIM_BY_ONE_ID_FROM_ONE_QUEUE
        )
    elif task_ids is None:
        sql = claim_statements.CLAIM_FROM_ONE_QUEUE if one else claim_statements.CLAIM_FROM_QUEUES
    elif scan_queue_ids:
        sql = (
            claim_statements.CLAIM_BY_IDS_TOPPED_UP_FROM_ONE_QUEUE
            if len(scan_queue_ids) == 1
            else claim_statements.CLAIM_BY_IDS_TOPPED_UP_FROM_QUEUES
        )
    else:
        sql = claim_statements.CLAIM_BY_IDS_FROM_ONE_QUEUE if one else claim_statements.CLAIM_BY_IDS_FROM_QUEUES
    return sql, {
        "queue_id": queue_ids[0],
        "queue_ids": list(queue_ids),
        "task_ids": list(task_ids or []),
        "task_id": task_ids[0] if task_ids else None,
        "scan_queue_id": scan_queue_ids[0] if scan_queue_ids else None,
        "scan_queue_ids": list(scan_queue_ids),
        "limit": limit,
        "worker_id": worker_id,
        "lease_seconds": settings.TASKFORGE_HEARTBEAT_TIMEOUT,
        "event_kind": "transition",
    }


# --- heartbeat, ack -------------------------------------------------------------------------


def heartbeat(
    task_id: uuid.UUID, *, worker_id: str, lease_token: str | None = None, progress: dict[str, Any] | None = None
) -> Row:
    """Extend the lease (never past the task's time limit); the first heartbeat moves ``claimed`` to ``executing``.

    ``progress``, when given, becomes the task's ``progress``; without it the
    last one stays. The row says whether a cancel was requested.
    """
    with lone_statement():
        moved = fetch_rows(statements.HEARTBEAT, heartbeat_params(task_id, worker_id, lease_token, progress))
        if not moved:
            raise not_held(task_id)
        report_on_commit([row for row in moved if row["from_status"] == Status.CLAIMED])
    return moved[0]


def heartbeat_params(
    task_id: uuid.UUID, worker_id: str, lease_token: str | None, progress: dict[str, Any] | None
) -> dict[str, Any]:
    """``HEARTBEAT``'s parameters: one definition for both paths."""
    return {
        "task_id": task_id,
        "worker_id": worker_id,
        "lease_token": lease_token,
        "lease_seconds": settings.TASKFORGE_HEARTBEAT_TIMEOUT,
        "progress": None if progress is None else Jsonb(progress, dumps=dumps_json),
    }


@dataclass(frozen=True)
class AckItem:
    task_id: uuid.UUID
    lease_token: str | None = None
    result: dict[str, Any] | None = None


def ack_many(worker_id: str, items: Sequence[AckItem]) -> list[Row | DomainErrorT]:
    """Ack several tasks in one statement; each item is judged alone.

    Returns, in order, the task row or the error (``TaskNotFound`` /
    ``LeaseLost``) for that item. Repeating an ack that already succeeded
    (same worker, same lease) returns the task unchanged.
    """
    with lone_statement():
        moved = fetch_rows(statements.ACK, ack_params(worker_id, items))
        report_on_commit(moved)
    if moved:
        failpoint("ack.after_commit")
    done = {row["id"]: row for row in moved}
    missing = [item for item in items if item.task_id not in done]
    if missing:
        current = tasks_by_id([item.task_id for item in missing])
        for item in missing:
            row = current.get(item.task_id)
            if row is not None and is_repeated_ack(row, worker_id=worker_id, lease_token=item.lease_token):
                done[item.task_id] = row
    return [done.get(item.task_id) or not_held(item.task_id) for item in items]


def ack_params(worker_id: str, items: Sequence[AckItem]) -> dict[str, Any]:
    """``ACK``'s parameters (the thread path's acks, of one task or many)."""
    return {
        "ids": [item.task_id for item in items],
        "tokens": [item.lease_token for item in items],
        "results": [None if item.result is None else Jsonb(item.result, dumps=dumps_json) for item in items],
        "worker_id": worker_id,
        "event_kind": "transition",
    }


def ack_one_params(worker_id: str, item: AckItem) -> dict[str, Any]:
    """``ACK_ONE``'s parameters (the event loop's ack of one task): ``ack_params``' for one item."""
    return {
        "task_id": item.task_id,
        "lease_token": item.lease_token,
        "result": None if item.result is None else Jsonb(item.result, dumps=dumps_json),
        "worker_id": worker_id,
        "event_kind": "transition",
    }


def ack(
    task_id: uuid.UUID, *, worker_id: str, lease_token: str | None = None, result: dict[str, Any] | None = None
) -> Row:
    (outcome,) = ack_many(worker_id, [AckItem(task_id, lease_token, result)])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


# --- failures: nack and lease expiry --------------------------------------------------------


@dataclass(frozen=True)
class NackItem:
    task_id: uuid.UUID
    error: str
    lease_token: str | None = None
    retry: bool = True
    retry_after_seconds: int | None = None
    # Never started: put back without using up an attempt (see decide.failed_attempt_outcome).
    release: bool = False


def _failure_params(locked: list[Row], wants: Mapping[uuid.UUID, NackItem] | None) -> dict[str, list[Any]]:
    """``FAIL``'s column arrays: per locked row, retry (with its delay), dead or cancelled, its error,
    and whether it is released (its attempt given back)."""
    ids: list[uuid.UUID] = []
    outcomes: list[str] = []
    delays: list[int] = []
    errors: list[str | None] = []
    released: list[bool] = []
    for row in locked:
        item = wants[row["id"]] if wants else None
        if item is None:
            outcome, delay = failed_attempt_outcome(row)
        else:
            outcome, delay = failed_attempt_outcome(
                row, wants_retry=item.retry, retry_after_seconds=item.retry_after_seconds, release=item.release
            )
        ids.append(row["id"])
        outcomes.append(str(outcome))
        delays.append(delay)
        errors.append(item.error if item else None)
        released.append(bool(item and item.release and outcome == Status.RETRY))
    return {"ids": ids, "outcomes": outcomes, "delays_ms": delays, "errors": errors, "released": released}


def nack_many(worker_id: str, items: Sequence[NackItem]) -> list[Row | DomainErrorT]:
    """Fail several held tasks; each item is judged alone, results in order.

    1. Lock the items still held (in id order), with what the decision needs.
    2. Decide retry-or-dead per row (``queues.lifecycle.decide``).
    3. Apply the outcomes in one statement; items not locked are lost leases.
    """
    with transaction.atomic():
        locked = fetch_rows(statements.LOCK_HELD_FOR_NACK, nack_lock_params(worker_id, items))
        moved = fetch_rows(statements.FAIL, nack_fail_params(worker_id, items, locked)) if locked else []
        report_on_commit(moved)
    by_id = {row["id"]: row for row in moved}
    return [by_id.get(item.task_id) or not_held(item.task_id) for item in items]


def nack_lock_params(worker_id: str, items: Sequence[NackItem]) -> dict[str, Any]:
    """``LOCK_HELD_FOR_NACK``'s parameters: one definition for both paths."""
    return {
        "ids": [item.task_id for item in items],
        "tokens": [item.lease_token for item in items],
        "worker_id": worker_id,
    }


def nack_fail_params(worker_id: str, items: Sequence[NackItem], locked: list[Row]) -> dict[str, Any]:
    """``FAIL``'s parameters for the ``locked`` rows of a nack: one definition for both paths."""
    wants = {item.task_id: item for item in items}
    return {**_failure_params(locked, wants), "event_worker": worker_id, "event_kind": "transition"}


def nack_read_one_params(worker_id: str, item: NackItem) -> dict[str, Any]:
    """``READ_HELD_FOR_NACK_ONE``'s parameters (the event loop's nack of one task)."""
    return {"task_id": item.task_id, "lease_token": item.lease_token, "worker_id": worker_id}


def nack_fail_one_params(worker_id: str, item: NackItem, read: Row) -> dict[str, Any]:
    """``FAIL_ONE_IF_UNCHANGED``'s parameters: the decision ``nack_fail_params`` makes for ``read``
    (``READ_HELD_FOR_NACK_ONE``'s row), with the lease and the values it was made from."""
    decided = nack_fail_params(worker_id, [item], [read])
    return {
        "task_id": item.task_id,
        "outcome": decided["outcomes"][0],
        "delay_ms": decided["delays_ms"][0],
        "error": decided["errors"][0],
        "release": decided["released"][0],
        "worker_id": worker_id,
        "lease_token": item.lease_token,
        "attempts": read["attempts"],
        "max_retries": read["max_retries"],
        "cancel_requested": read["cancel_requested"],
        "event_worker": decided["event_worker"],
        "event_kind": decided["event_kind"],
    }


def nack(
    task_id: uuid.UUID,
    *,
    worker_id: str,
    error: str,
    lease_token: str | None = None,
    retry: bool = True,
    retry_after_seconds: int | None = None,
    release: bool = False,
) -> Row:
    return nack_item(NackItem(task_id, error, lease_token, retry, retry_after_seconds, release), worker_id=worker_id)


def nack_item(item: NackItem, *, worker_id: str) -> Row:
    """:func:`nack` of one :class:`NackItem` (as ``lease_on_loop.nack_on_loop`` takes it); raises its domain error."""
    (outcome,) = nack_many(worker_id, [item])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def expire_leases(limit: int = 500) -> int:
    """Fail every task whose lease ran out (a failed attempt). Returns how many.

    A lease that ran out at its task's time limit (``timeout_seconds``: leases
    are never extended past it) is an attempt that took too long, and says so;
    any other is a worker that went silent. A task whose cancel was requested
    is cancelled rather than retried.
    """
    with transaction.atomic():
        locked = fetch_rows(statements.LOCK_EXPIRED, {"limit": limit})
        if not locked:
            return 0
        holders = {
            row["id"]: row["claimed_by"]
            for row in fetch_rows(statements.LEASE_HOLDERS, {"task_ids": [r["id"] for r in locked]})
        }
        decided = _failure_params(locked, None)
        decided["errors"] = [
            timed_out_error(row["timeout_seconds"])
            if row["timed_out"]
            else lease_expired_error(settings.TASKFORGE_HEARTBEAT_TIMEOUT, holders[row["id"]])
            for row in locked
        ]
        moved = fetch_rows(statements.FAIL, {**decided, "event_worker": None, "event_kind": "transition"})
        for row in moved:
            row["expired"] = True
        report_on_commit(moved)
    failpoint("watchdog.after_expire")
    return len(moved)
