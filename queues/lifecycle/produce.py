"""Enqueue: producers create pending tasks, idempotently per key."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.db import IntegrityError, transaction
from psycopg.errors import ForeignKeyViolation
from psycopg.types.json import Jsonb

from queues.dispatch import announce
from queues.errors import IdempotencyConflict, QueueNotFound
from queues.lifecycle import statements
from queues.lifecycle.ids import new_task_ids
from queues.lifecycle.notify import report_on_commit
from queues.lifecycle.rows import Row, dumps_json, fetch_rows, lone_statement
from queues.models import Queue
from taskforge.ops.failpoints import failpoint


@dataclass(frozen=True)
class NewTask:
    payload: dict[str, Any]
    priority: int = 5
    scheduled_at: datetime | None = None
    idempotency_key: str | None = None
    max_retries: int | None = None
    fingerprint: str | None = None
    kind: str | None = None
    timeout_seconds: int | None = None  # None: the queue's value at enqueue time


def fingerprint(body: dict[str, Any]) -> str:
    """A stable hash of an enqueue body: same key + same body = a replay."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def enqueue(queue: Queue, items: Sequence[NewTask], *, report: bool = True) -> list[tuple[Row, bool]]:
    """Create tasks; return ``(task, created)`` per item, in order.

    1. One multi-row INSERT; an ``idempotency_key`` that already exists in the
       queue is skipped by ``ON CONFLICT DO NOTHING`` (which waits for a
       concurrent insert of the same key to commit, so exactly one wins).
    2. Skipped items are answered with the existing task, or a 409 when the
       key was used with another body. The whole call is one transaction
       (without keys, one statement in autocommit: see ``rows.lone_statement``).

    ``report=False`` leaves the transitions' log lines and counters to the
    caller (``grouped``: each request reports its own task, in its own context).
    """
    try:
        return _enqueue(queue, items, report)
    except IntegrityError as exc:
        # The queue row came from a per-process copy (queues.api.lookups) and was deleted
        # since; the foreign key is checked at commit.
        if isinstance(exc.__cause__, ForeignKeyViolation):
            raise QueueNotFound(queue.name) from None
        raise


def enqueue_params(queue: Queue, items: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> dict[str, Any]:
    """The parameters of ``statements.ENQUEUE`` that insert ``items`` into ``queue`` with ``ids``."""
    return {
        "ids": ids,
        "payloads": [Jsonb(item.payload, dumps=dumps_json) for item in items],
        "priorities": [item.priority for item in items],
        "scheduled": [item.scheduled_at for item in items],
        "keys": [item.idempotency_key for item in items],
        "retries": [item.max_retries for item in items],
        "prints": [item.fingerprint for item in items],
        "ords": list(range(len(items))),
        "kinds": [item.kind for item in items],
        "timeouts": [item.timeout_seconds for item in items],
        "queue_id": queue.id,
        "queue_max_retries": queue.max_retries,
        "queue_timeout": queue.timeout_seconds,
        "event_kind": "transition",
    }


def _enqueue(queue: Queue, items: Sequence[NewTask], report: bool) -> list[tuple[Row, bool]]:
    keys = [item.idempotency_key for item in items if item.idempotency_key is not None]
    ids = new_task_ids(len(items))
    # Without keys the insert is the whole move; with them, the read of the tasks the keys
    # already name must see the same snapshot, so both run in one transaction.
    with transaction.atomic() if keys else lone_statement():
        inserted = fetch_rows(statements.ENQUEUE, enqueue_params(queue, items, ids))
        by_key = {row["idempotency_key"]: row for row in inserted if row["idempotency_key"]}
        existing: dict[str, Row] = {}
        if len(by_key) < len(keys):
            missing = [key for key in keys if key not in by_key]
            for row in fetch_rows(statements.TASKS_BY_IDEMPOTENCY_KEYS, {"queue_id": queue.id, "keys": missing}):
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
        if report:
            report_on_commit(inserted)
    failpoint("enqueue.after_commit")
    return results
