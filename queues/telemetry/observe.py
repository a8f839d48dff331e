"""What the world learns of each transition: one JSON log line and counters.

Called by ``queues.lifecycle`` after the commit, from whichever process made
the move (API, scheduler, watchdog), so logs and counters never report a move
that was rolled back.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from typing import Any

from queues.models import LEASED, Queue
from taskforge.infra.after_answer import after_answer
from taskforge.ops.logs import Batch, log_batch

logger = logging.getLogger("taskforge.transitions")

# Queue names never change (the API refuses renames), so this cache is never stale;
# a deleted queue's id is never reused.
_queue_names: dict[uuid.UUID, str] = {}


def queue_name(queue_id: uuid.UUID) -> str:
    name = _queue_names.get(queue_id)
    if name is None:
        name = Queue.objects.filter(pk=queue_id).values_list("name", flat=True).first() or str(queue_id)
        _queue_names[queue_id] = name
    return name


def transitions(rows: list[dict[str, Any]]) -> None:
    """Log and count committed moves."""
    from queues.telemetry import counters

    _log(rows)
    try:
        counters.record_transitions(rows, queue_name)
    except Exception:
        # The move is committed and the caller is owed its answer: a metrics bug must not turn it into a 500.
        logger.exception("recording metrics failed", extra={"event": "metrics.error"})


async def transitions_on_loop(rows: list[dict[str, Any]], queue: Queue | None = None) -> None:
    """:func:`transitions` for moves made on the event loop: the same line, the same counters.

    No lookup may block the loop: the moves' queues are ``queue`` or named
    by :func:`name_queues` first. The line is written once the request has
    its answer (``after_answer``): nobody waits on it. A counter write that
    is due at once goes to a thread and is awaited: the answer still comes
    after it, so another process's ``/metrics`` counts it.
    """
    from queues.telemetry import counters

    if queue is not None:
        _queue_names[queue.id] = queue.name
    await after_answer(lambda: _log(rows))
    try:
        await counters.record_transitions_on_loop(rows, queue_name)
    except Exception:
        logger.exception("recording metrics failed", extra={"event": "metrics.error"})


def unnamed(queue_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """The queues among ``queue_ids`` this process cannot name without a query."""
    return {queue_id for queue_id in queue_ids if queue_id not in _queue_names}


def name_queues(names: dict[uuid.UUID, str]) -> None:
    """Remember queue names read elsewhere (on the event loop, where :func:`queue_name` would block)."""
    _queue_names.update(names)


def _log(rows: list[dict[str, Any]]) -> None:
    batch: Batch = []
    for row in rows:
        queue = queue_name(row["queue_id"])
        task_id = str(row["id"])  # a UUID's text is built in Python each time it is asked for
        duration_ms = round(float(row["duration_ms"] or 0.0), 3)
        message = f"task {task_id} {row['from_status']} -> {row['status']} in {queue} ({duration_ms:.1f} ms)"
        fields = {
            "event": "task.transition",
            "task_id": task_id,
            "queue": queue,
            "worker_id": _worker(row),
            "from_status": row["from_status"],
            "to_status": row["status"],
            "duration_ms": duration_ms,
            "attempts": row["attempts"],
        }
        batch.append((message, fields))
    log_batch(logger, logging.INFO, batch)


def _worker(row: dict[str, Any]) -> str | None:
    """The worker the move concerns: the one that made it, or, for a lease
    expiry (made by the watchdog), the one that lost the lease."""
    if row.get("event_worker"):
        return row["event_worker"]
    if row["from_status"] in LEASED:
        return row.get("claimed_by")
    return None


def discarded(queue: Queue, count: int) -> None:
    if count:
        logger.info(
            "discarded %d dead task(s)",
            count,
            extra={"event": "task.discarded", "queue": queue.name, "count": count},
        )
