"""A worker's single moves on the event loop: a claim from one queue, a heartbeat, an ack, a nack.

The same statements as :mod:`queues.lifecycle.lease` with the same
parameters and decisions (its ``claim_statement``, ``heartbeat_params`` and
``nack_fail_params``), except that a claim of one id, an ack and a nack take
forms of one task whose plans Postgres keeps (``claim_statement(plan_kept=True)``,
``ACK_ONE`` with ``ack_one_params``, ``READ_HELD_FOR_NACK_ONE`` and
``FAIL_ONE_IF_UNCHANGED``: the loop's connections never choose a sequential
scan, so a kept plan cannot read the whole table), on a connection of the
event loop's pool (``taskforge.infra.postgres.aio``), in autocommit, so a
move is durable when it returns; then the same reports (settled bells,
transition line, counters) and failpoints, in the same order, the bells and
the line once the request has its answer (``taskforge.infra.after_answer``).
A thread hand-off, Django's request signals and its connection wrapper cost
each of these calls about as much as its statement.

What the thread path reads after a heartbeat, ack or nack that moved nothing
(does the task exist; does the ack repeat one that succeeded) is not
written twice: those return None and the caller runs the call again on the
thread pool, where ``lease`` judges it. Every one of these statements is
guarded on the lease, so running again one that moved nothing moves nothing
either.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from queues.dispatch import announce
from queues.lifecycle.lease import (
    AckItem,
    NackItem,
    ack_one_params,
    claim_statement,
    heartbeat_params,
    nack_fail_one_params,
    nack_read_one_params,
)
from queues.lifecycle.notify import awaited_settled
from queues.lifecycle.read_statements import QUEUE_NAMES
from queues.lifecycle.rows import Row, fetch_rows_on_loop
from queues.lifecycle.statements import ACK_ONE, FAIL_ONE_IF_UNCHANGED, HEARTBEAT, READ_HELD_FOR_NACK_ONE
from queues.models import Queue, Status
from queues.telemetry import observe
from taskforge.infra.after_answer import after_answer
from taskforge.ops.failpoints import failpoint_on_loop


async def claim_on_loop(
    worker_id: str, queue: Queue, limit: int, *, task_ids: Sequence[uuid.UUID] | None = None, scan: bool = False
) -> list[Row]:
    """:func:`lease.claim` of one queue: ``task_ids`` from its lane (topped up by a scan with ``scan``), or a scan."""
    if limit <= 0:
        return []
    moved = await fetch_rows_on_loop(
        *claim_statement(worker_id, [queue.id], limit, task_ids, [queue.id] if scan else (), plan_kept=True)
    )
    if moved:
        await observe.transitions_on_loop(moved, queue)
        await failpoint_on_loop("claim.after_commit")
    return moved


async def heartbeat_on_loop(
    task_id: uuid.UUID, *, worker_id: str, lease_token: str | None, progress: dict[str, Any] | None
) -> Row | None:
    """:func:`lease.heartbeat`; None when the lease is not held (the thread path says why)."""
    moved = await fetch_rows_on_loop(HEARTBEAT, heartbeat_params(task_id, worker_id, lease_token, progress))
    if not moved:
        return None
    started = [row for row in moved if row["from_status"] == Status.CLAIMED]
    if started:
        await _name_queues(row["queue_id"] for row in started)
        await observe.transitions_on_loop(started)
    return moved[0]


async def ack_on_loop(
    task_id: uuid.UUID, *, worker_id: str, lease_token: str | None, result: dict[str, Any] | None
) -> Row | None:
    """:func:`lease.ack`; None when nothing moved (a lost lease, or a repeat: the thread path tells them apart)."""
    moved = await fetch_rows_on_loop(ACK_ONE, ack_one_params(worker_id, AckItem(task_id, lease_token, result)))
    if not moved:
        return None
    settled = awaited_settled(moved)
    if settled:  # producers waiting on the result hear first, the line follows (as report_on_commit)
        await after_answer(lambda: announce.settled_on_loop(settled))
    await _name_queues(row["queue_id"] for row in moved)
    await observe.transitions_on_loop(moved)
    await failpoint_on_loop("ack.after_commit")
    return moved[0]


async def nack_on_loop(item: NackItem, *, worker_id: str) -> Row | None:
    """:func:`lease.nack`; None when the lease is not held, or no longer holds what the decision read.

    Two statements in autocommit where the thread path's transaction takes
    four round trips (``BEGIN``, the lock, ``FAIL``, ``COMMIT``): the held
    task read without a lock (``READ_HELD_FOR_NACK_ONE``), its outcome decided
    as there (``nack_fail_one_params``: ``decide.failed_attempt_outcome``, retry
    after a backoff, dead or cancelled), then ``FAIL_ONE_IF_UNCHANGED``, which
    locks the task and applies the outcome only if the lease is still held and
    the attempts, retry limit and cancel request it was decided from still
    stand. A cancel requested or a lease lost in between makes it move nothing:
    None, and the caller runs the nack again on the thread path, which decides
    under its lock (or says why the lease is not held).
    """
    read = await fetch_rows_on_loop(READ_HELD_FOR_NACK_ONE, nack_read_one_params(worker_id, item))
    if not read:
        return None
    moved = await fetch_rows_on_loop(FAIL_ONE_IF_UNCHANGED, nack_fail_one_params(worker_id, item, read[0]))
    if not moved:
        return None
    settled = awaited_settled(moved)
    if settled:  # a dead task: producers waiting on the result hear first (as report_on_commit)
        await after_answer(lambda: announce.settled_on_loop(settled))
    await _name_queues(row["queue_id"] for row in moved)
    await observe.transitions_on_loop(moved)
    return moved[0]


async def _name_queues(queue_ids: Iterable[uuid.UUID]) -> None:
    """Read the names of the moves' queues this process has not named yet (the log line and answer need them)."""
    missing = observe.unnamed(queue_ids)
    if missing:
        found = {row["id"]: row["name"] for row in await fetch_rows_on_loop(QUEUE_NAMES, {"ids": list(missing)})}
        # A queue deleted meanwhile is named by its id, as queue_name does.
        observe.name_queues({queue_id: found.get(queue_id, str(queue_id)) for queue_id in missing})
