"""The history sampler: once a minute, every queue's cumulative counters become one row in Postgres.

The counters (``queues.telemetry.counters``) already hold, in Redis, what
every process counted: tasks enqueued, finished attempts by outcome, and the
histograms of execution time and enqueue-to-start. Copying them once a
minute costs nothing per task; a minute's figures are then the difference
between two samples (``queues.telemetry.history``). Several samplers may
run: the first to insert a minute's rows wins (``ON CONFLICT DO NOTHING``),
and Postgres' clock names the minute. Samples older than
``TASKFORGE_HISTORY_DAYS`` are deleted in batches.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson
import redis
from django.conf import settings
from django.db import connection

from queues.telemetry import counters

logger = logging.getLogger("taskforge.loops.history")

PRUNE_BATCH = 5000

_MINUTE = """
SELECT date_trunc('minute', now()),
       EXISTS (SELECT 1 FROM tf_queue_sample WHERE minute = date_trunc('minute', now()))
"""
_INSERT = """
INSERT INTO tf_queue_sample (queue_name, minute, taken_at, enqueued, done, failed, dead, expired, cancelled,
                             run_buckets, wait_buckets)
SELECT s.queue_name, date_trunc('minute', now()), now(), s.enqueued, s.done, s.failed, s.dead, s.expired,
       s.cancelled, s.run_buckets::bigint[], s.wait_buckets::bigint[]
FROM jsonb_to_recordset(%(samples)s::jsonb) AS s(queue_name text, enqueued bigint, done bigint, failed bigint,
     dead bigint, expired bigint, cancelled bigint, run_buckets text, wait_buckets text)
ON CONFLICT (queue_name, minute) DO NOTHING
"""
_PRUNE = """
DELETE FROM tf_queue_sample WHERE id IN (
    SELECT id FROM tf_queue_sample WHERE minute < now() - make_interval(days => %(days)s) LIMIT %(limit)s
)
"""


@dataclass(frozen=True)
class Pass:
    sampled: int
    pruned: int


def samples(snapshot: counters.Snapshot) -> list[dict[str, Any]]:
    """One row per queue the counters know of, cumulative as they stand."""
    queues = (
        set(snapshot.enqueued)
        | {queue for queue, _ in snapshot.completed}
        | set(snapshot.durations)
        | set(snapshot.waits)
    )
    empty = [0] * len(counters.BUCKETS)
    rows = []
    for queue in sorted(queues):
        outcome = {status: snapshot.completed.get((queue, status), 0) for status in counters.COMPLETION_STATUSES}
        runs = [count for _, count in snapshot.durations[queue][0]] if queue in snapshot.durations else empty
        waits = [count for _, count in snapshot.waits[queue][0]] if queue in snapshot.waits else empty
        rows.append(
            {
                "queue_name": queue,
                "enqueued": snapshot.enqueued.get(queue, 0),
                **outcome,
                "run_buckets": "{" + ",".join(map(str, runs)) + "}",
                "wait_buckets": "{" + ",".join(map(str, waits)) + "}",
            }
        )
    return rows


def run_once() -> Pass:
    """Take this minute's samples unless a process already has; prune what is past retention."""
    with connection.cursor() as cursor:
        cursor.execute(_PRUNE, {"days": settings.TASKFORGE_HISTORY_DAYS, "limit": PRUNE_BATCH})
        pruned = cursor.rowcount
        cursor.execute(_MINUTE)
        _, taken = cursor.fetchone()
        if taken:
            return Pass(sampled=0, pruned=pruned)
        try:
            rows = samples(counters.snapshot())
        except redis.RedisError as exc:
            logger.warning(
                "history not sampled: redis unavailable (%s)", exc, extra={"event": "history.redis_unavailable"}
            )
            return Pass(sampled=0, pruned=pruned)
        cursor.execute(_INSERT, {"samples": orjson.dumps(rows).decode()})
        return Pass(sampled=cursor.rowcount, pruned=pruned)
