"""Queue depth for ``/metrics``, computed from Postgres at scrape time, cheaply.

A table may hold millions of finished tasks, so nothing here scans it:

* Active states (pending, claimed, executing, retry, dead) are counted per
  (queue, status) with a LATERAL subquery whose two equalities match the
  leading columns of ``tf_task_queue_status`` (queue, status, priority,
  scheduled_at): an index-only range scan over just those rows, however
  many finished rows sit next to them.
* ``done`` and ``cancelled`` grow without bound until retention prunes them.
  They are counted the same way but at most once per
  ``FINISHED_MAX_AGE_SECONDS`` for all API processes together: the result is
  cached in Redis, and every other scrape reads the cache.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

import orjson
import redis
from django.db import connection

from taskforge.redis import redis_client

logger = logging.getLogger("taskforge.metrics")

ACTIVE_STATUSES = ("pending", "claimed", "executing", "retry", "dead")
FINISHED_STATUSES = ("done", "cancelled")
# The statuses of ``taskforge_queue_depth``: those of the stats endpoint, where
# ``pending`` is due pending tasks and ``scheduled`` pending ones not yet due.
DEPTH_STATUSES = ("pending", "scheduled", "claimed", "executing", "retry", "done", "dead", "cancelled")
FINISHED_MAX_AGE_SECONDS = 30
FINISHED_CACHE_KEY = "tf:{metrics}:finished_depth"

_COUNT = """
SELECT q.id AS queue_id, q.name, s.status, c.total, c.due, c.oldest_due_age
FROM tf_queue q
CROSS JOIN unnest(%(statuses)s::text[]) AS s(status)
CROSS JOIN LATERAL (
    SELECT count(*) AS total,
           count(*) FILTER (WHERE t.scheduled_at <= now()) AS due,
           extract(epoch FROM now() - min(t.scheduled_at) FILTER (WHERE t.scheduled_at <= now())) AS oldest_due_age
    FROM tf_task t
    WHERE t.queue_id = q.id AND t.status = s.status
) c
"""


@dataclass
class QueueDepth:
    name: str
    depth: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DEPTH_STATUSES, 0))
    oldest_pending_age_seconds: float | None = None

    @property
    def dlq_depth(self) -> int:
        return self.depth["dead"]


def _count(statuses: tuple[str, ...]) -> list[tuple[uuid.UUID, str, str, int, int, float | None]]:
    with connection.cursor() as cursor:
        cursor.execute(_COUNT, {"statuses": list(statuses)})
        return cursor.fetchall()


def _finished_counts() -> dict[str, dict[str, int]]:
    """queue id -> {"done": n, "cancelled": m}, from the shared cache when fresh."""
    client = redis_client()
    try:
        cached = client.get(FINISHED_CACHE_KEY)
        if cached is not None:
            return orjson.loads(cached)
    except redis.RedisError:
        client = None  # count directly; the cache is an optimisation
    counts: dict[str, dict[str, int]] = {}
    for queue_id, _name, status, total, _due, _age in _count(FINISHED_STATUSES):
        counts.setdefault(str(queue_id), {})[status] = int(total)
    if client is not None:
        try:
            client.set(FINISHED_CACHE_KEY, orjson.dumps(counts), ex=FINISHED_MAX_AGE_SECONDS)
        except redis.RedisError:
            pass
    return counts


def queue_depths() -> list[QueueDepth]:
    """Depth by status, DLQ depth and oldest due pending age of every queue, by name."""
    queues: dict[uuid.UUID, QueueDepth] = {}
    for queue_id, name, status, total, due, oldest in _count(ACTIVE_STATUSES):
        entry = queues.setdefault(queue_id, QueueDepth(name))
        if status == "pending":
            entry.depth["pending"] = int(due)
            entry.depth["scheduled"] = int(total) - int(due)
            entry.oldest_pending_age_seconds = None if oldest is None else float(oldest)
        else:
            entry.depth[status] = int(total)
    finished = _finished_counts()
    for queue_id, entry in queues.items():
        for status, total in finished.get(str(queue_id), {}).items():
            entry.depth[status] = total
    return sorted(queues.values(), key=lambda entry: entry.name)
