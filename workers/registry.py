"""Who was seen when: one upsert per protocol call, one query for the listing."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection

from taskforge.http.middleware import caller_var

LISTED_FOR = timedelta(minutes=10)

_SEEN = """
INSERT INTO tf_worker (worker_id, last_seen_at, last_claim_at, last_heartbeat_at, address, agent)
VALUES (%(worker_id)s, now(),
        CASE WHEN %(claim)s THEN now() END, CASE WHEN %(heartbeat)s THEN now() END, %(address)s, %(agent)s)
ON CONFLICT (worker_id) DO UPDATE
SET last_seen_at = now(),
    address = coalesce(EXCLUDED.address, tf_worker.address),
    agent = coalesce(EXCLUDED.agent, tf_worker.agent),
    last_claim_at = CASE WHEN %(claim)s THEN now() ELSE tf_worker.last_claim_at END,
    last_heartbeat_at = CASE WHEN %(heartbeat)s THEN now() ELSE tf_worker.last_heartbeat_at END
"""

# Staleness and heartbeat age are judged on heartbeats only (the claim stands in
# until the first heartbeat): a worker whose heartbeat thread died but which
# still claims is exactly what ``stale`` must show.
_SELECT_WORKERS = """
SELECT w.worker_id, w.last_seen_at, w.last_heartbeat_at, w.last_claim_at, w.control, w.control_at,
       w.address, w.agent,
       coalesce(array_agg(t.id ORDER BY t.claimed_at) FILTER (WHERE t.id IS NOT NULL), '{}') AS current_tasks,
       count(t.id) > 0 AND coalesce(w.last_heartbeat_at, w.last_claim_at)
           < now() - make_interval(secs => %(timeout)s) AS stale,
       extract(epoch FROM now() - coalesce(w.last_heartbeat_at, w.last_claim_at)) AS heartbeat_age_seconds
FROM tf_worker w
LEFT JOIN tf_task t ON t.claimed_by = w.worker_id AND t.status IN ('claimed', 'executing')
WHERE {where}
GROUP BY w.worker_id
ORDER BY w.worker_id
"""
_LISTING = _SELECT_WORKERS.replace("{where}", "w.last_seen_at > now() - make_interval(secs => %(listed_for)s)")
_ONE = _SELECT_WORKERS.replace("{where}", "w.worker_id = %(worker_id)s")


# A busy worker calls many times a second; the listing and the staleness check
# (TASKFORGE_HEARTBEAT_TIMEOUT, 30 s by default) need its times to the second,
# so each process writes a given (worker, kind of call) at most once per second.
# Each write is a commit: make bench counted 5% of a drain's API CPU in them.
SEEN_RESOLUTION_SECONDS = 1.0
_written: dict[tuple[str, bool, bool], float] = {}
_MAX_REMEMBERED = 10_000


def seen_is_due(worker_id: str, *, claim: bool = False, heartbeat: bool = False) -> bool:
    """Whether :func:`seen` would write now (the event loop's calls leave those to the thread pool)."""
    last = _written.get((worker_id, claim, heartbeat), -SEEN_RESOLUTION_SECONDS)
    return time.monotonic() - last >= SEEN_RESOLUTION_SECONDS


def seen(worker_id: str, *, claim: bool = False, heartbeat: bool = False) -> None:
    if not seen_is_due(worker_id, claim=claim, heartbeat=heartbeat):
        return
    key = (worker_id, claim, heartbeat)
    now = time.monotonic()
    with connection.cursor() as cursor:
        caller = caller_var.get()
        cursor.execute(
            _SEEN,
            {
                "worker_id": worker_id,
                "claim": claim,
                "heartbeat": heartbeat,
                "address": caller.address if caller else None,
                "agent": (caller.agent or None) if caller else None,
            },
        )
    if not connection.in_atomic_block:  # written for sure only once committed
        if len(_written) >= _MAX_REMEMBERED:
            _written.clear()
        _written[key] = now


def forget_writes() -> None:
    """Write the next call of every worker (tests that roll their rows back)."""
    _written.clear()


def active_workers() -> list[dict[str, Any]]:
    """The workers seen within ``LISTED_FOR``, by id."""
    return _select(_LISTING, {"listed_for": LISTED_FOR.total_seconds()})


def one_worker(worker_id: str) -> dict[str, Any] | None:
    """One worker as the listing shows it, however long ago it was seen; None if never (or pruned)."""
    found = _select(_ONE, {"worker_id": worker_id})
    return found[0] if found else None


def _select(statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(statement, {"timeout": settings.TASKFORGE_HEARTBEAT_TIMEOUT, **params})
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
