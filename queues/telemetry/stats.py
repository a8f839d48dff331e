"""Queue statistics: one function behind the stats endpoint and the dashboard.

Depth is counted the way ``queues.telemetry.depth`` counts it for ``/metrics``, so a
table holding millions of finished tasks costs no full scan: active states
through the leading columns of ``tf_task_queue_status`` (an index-only range
scan over just those rows). ``done``/``cancelled`` only grow until retention
prunes them, so they are counted exactly only up to ``FINISHED_EXACT_UP_TO``
per queue (a scan that stops there); a bigger count comes from the shared,
periodically refreshed count ``/metrics`` uses (``queues.telemetry.depth``),
so no call or dashboard tick reads millions of finished rows. Rates come from
the event table's (queue, at) index over the last 60 seconds.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection, transaction

from queues.models import Queue
from queues.telemetry import depth
from queues.telemetry.depth import ACTIVE_STATUSES, DEPTH_STATUSES

RATE_WINDOW_SECONDS = 60
# Finished tasks counted row by row per queue and status; beyond this the
# shared cached count answers (documented in docs/api.md, "Stats").
FINISHED_EXACT_UP_TO = 10_000

_ACTIVE = """
SELECT t.queue_id, t.status, count(*) AS total,
       count(*) FILTER (WHERE t.scheduled_at <= now()) AS due,
       extract(epoch FROM now() - min(t.scheduled_at) FILTER (WHERE t.scheduled_at <= now())) AS oldest_due_age
FROM tf_task t
WHERE t.queue_id = ANY(%(queue_ids)s) AND t.status = ANY(%(statuses)s)
GROUP BY t.queue_id, t.status
"""

# Each count stops after cap + 1 index entries of (queue, status).
_FINISHED = """
SELECT q.id, s.status,
       (SELECT count(*) FROM (
            SELECT 1 FROM tf_task t WHERE t.queue_id = q.id AND t.status = s.status LIMIT %(cap)s + 1
        ) AS capped) AS total
FROM unnest(%(queue_ids)s::uuid[]) AS q(id)
CROSS JOIN (VALUES ('done'), ('cancelled')) AS s(status)
"""

_RATES = """
SELECT e.queue_id,
       count(*) FILTER (WHERE e.from_status IS NULL) AS enqueued,
       count(*) FILTER (WHERE e.to_status = 'done') AS acked,
       count(*) FILTER (WHERE e.from_status IN ('claimed', 'executing')
                        AND e.to_status IN ('retry', 'dead')) AS failed
FROM tf_task_event e
WHERE e.queue_id = ANY(%(queue_ids)s) AND e.kind = 'transition'
      AND e.at > now() - make_interval(secs => %(window)s)
GROUP BY e.queue_id
"""


def _fetch(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")  # compiling costs more than these scans
        cursor.execute(sql, params)
        return cursor.fetchall()


def _depths(ids: list[uuid.UUID]) -> tuple[dict[uuid.UUID, dict[str, int]], dict[uuid.UUID, float]]:
    depths = {queue_id: dict.fromkeys(DEPTH_STATUSES, 0) for queue_id in ids}
    oldest: dict[uuid.UUID, float] = {}
    for queue_id, status, total, due, oldest_age in _fetch(
        _ACTIVE, {"queue_ids": ids, "statuses": list(ACTIVE_STATUSES)}
    ):
        if status == "pending":
            depths[queue_id]["pending"] = int(due)
            depths[queue_id]["scheduled"] = int(total) - int(due)
            if oldest_age is not None:
                oldest[queue_id] = float(oldest_age)
        else:
            depths[queue_id][status] = int(total)
    shared: dict[str, dict[str, int]] | None = None
    for queue_id, status, total in _fetch(_FINISHED, {"queue_ids": ids, "cap": FINISHED_EXACT_UP_TO}):
        if total > FINISHED_EXACT_UP_TO:
            shared = depth.finished_counts() if shared is None else shared
            # The shared count may predate the rows just counted: never show less than we saw.
            total = max(total, shared.get(str(queue_id), {}).get(status, 0))
        depths[queue_id][status] = int(total)
    return depths, oldest


def queue_stats(queues: list[Queue]) -> list[dict[str, Any]]:
    """The contract's stats object for each queue, in the given order."""
    ids = [q.id for q in queues]
    depths, oldest = _depths(ids)
    rates = {row[0]: row for row in _fetch(_RATES, {"queue_ids": ids, "window": RATE_WINDOW_SECONDS})}
    results = []
    for q in queues:
        _, enqueued, acked, failed = rates.get(q.id, (q.id, 0, 0, 0))
        finished = acked + failed
        age = oldest.get(q.id)
        results.append(
            {
                "queue": q.name,
                "depth": depths[q.id],
                "dlq_depth": depths[q.id]["dead"],
                "enqueued_per_sec": round(enqueued / RATE_WINDOW_SECONDS, 3),
                "completed_per_sec": round(acked / RATE_WINDOW_SECONDS, 3),
                "error_rate": round(failed / finished, 4) if finished else 0,
                "oldest_pending_age_seconds": None if age is None else round(age, 3),
                "paused": q.paused,
            }
        )
    return results
