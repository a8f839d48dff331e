"""Queue statistics: one function behind the stats endpoint, the dashboard and /metrics.

Active states are counted through the partial and composite indexes; rates
come from the event table's (queue, at) index over the last 60 seconds.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection

from queues.models import Queue

RATE_WINDOW_SECONDS = 60

_DEPTHS = """
SELECT t.queue_id,
       count(*) FILTER (WHERE t.status = 'pending' AND t.scheduled_at <= now()) AS pending,
       count(*) FILTER (WHERE t.status = 'pending' AND t.scheduled_at > now()) AS scheduled,
       count(*) FILTER (WHERE t.status = 'claimed') AS claimed,
       count(*) FILTER (WHERE t.status = 'executing') AS executing,
       count(*) FILTER (WHERE t.status = 'retry') AS retry,
       count(*) FILTER (WHERE t.status = 'done') AS done,
       count(*) FILTER (WHERE t.status = 'dead') AS dead,
       count(*) FILTER (WHERE t.status = 'cancelled') AS cancelled,
       extract(epoch FROM now() - min(t.scheduled_at)
               FILTER (WHERE t.status = 'pending' AND t.scheduled_at <= now())) AS oldest_pending_age
FROM tf_task t
WHERE t.queue_id = ANY(%(queue_ids)s)
GROUP BY t.queue_id
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

DEPTH_STATUSES = ("pending", "scheduled", "claimed", "executing", "retry", "done", "dead", "cancelled")


def _by_queue(sql: str, params: dict[str, Any]) -> dict[uuid.UUID, dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [column.name for column in cursor.description]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}


def queue_stats(queues: list[Queue]) -> list[dict[str, Any]]:
    """The contract's stats object for each queue, in the given order."""
    ids = [q.id for q in queues]
    depths = _by_queue(_DEPTHS, {"queue_ids": ids})
    rates = _by_queue(_RATES, {"queue_ids": ids, "window": RATE_WINDOW_SECONDS})
    results = []
    for q in queues:
        depth = depths.get(q.id, {})
        rate = rates.get(q.id, {})
        acked, failed = rate.get("acked", 0), rate.get("failed", 0)
        finished = acked + failed
        oldest = depth.get("oldest_pending_age")
        results.append(
            {
                "queue": q.name,
                "depth": {status: depth.get(status, 0) for status in DEPTH_STATUSES},
                "dlq_depth": depth.get("dead", 0),
                "enqueued_per_sec": round(rate.get("enqueued", 0) / RATE_WINDOW_SECONDS, 3),
                "completed_per_sec": round(acked / RATE_WINDOW_SECONDS, 3),
                "error_rate": round(failed / finished, 4) if finished else 0,
                "oldest_pending_age_seconds": None if oldest is None else round(float(oldest), 3),
                "paused": q.paused,
            }
        )
    return results
