"""The queue overview's data: one snapshot of every queue, for the index page and the stream.

``queue_stats`` is the same function behind ``GET /queues/{name}/stats`` and
``/metrics``, so the dashboard never disagrees with the API. A snapshot is
plain JSON-ready data: the index page renders it, the stream sends it.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
import redis
from django.utils import timezone

from queues.models import Queue
from queues.telemetry.stats import queue_stats
from taskforge.infra.redis import redis_client

logger = logging.getLogger("taskforge.dashboard")


def snapshot() -> dict[str, Any]:
    """Every queue's stats plus the settings an operator watches (paused, rate limit)."""
    queues = list(Queue.objects.order_by("name"))
    rows = []
    for queue, stats in zip(queues, queue_stats(queues), strict=True):
        rows.append(
            {
                **stats,
                "id": str(queue.id),
                "rate_limit": queue.rate_limit,
                "rate_burst": queue.effective_burst,
                "max_retries": queue.max_retries,
                # A push queue: TaskForge delivers its tasks (the pusher), no worker claims them.
                "push": queue.push is not None,
            }
        )
    return {"at": timezone.now().isoformat(), "queues": rows}


# One computation per tick for the whole deployment, not per API process: the
# first process to take the lock computes and publishes; the others read the
# published copy. Redis is only a cache here: without it each process computes
# its own snapshot, which is correct, just more work for Postgres.
FRESH_KEY = "tf:dashboard:snapshot"
LAST_KEY = "tf:dashboard:snapshot:last"
LOCK_KEY = "tf:dashboard:snapshot:lock"
LOCK_SECONDS = 30  # longer than any stats query may run (statement_timeout)


def shared_snapshot(fresh_for: float) -> dict[str, Any]:
    """The latest snapshot, computed at most once per ``fresh_for`` seconds across all processes."""
    try:
        client = redis_client()
        fresh = client.get(FRESH_KEY)
        if fresh is not None:
            return orjson.loads(fresh)
        if not client.set(LOCK_KEY, b"1", nx=True, ex=LOCK_SECONDS):
            # Another process is computing right now: its previous result is at most a tick old.
            last = client.get(LAST_KEY)
            if last is not None:
                return orjson.loads(last)
    except redis.RedisError:
        logger.warning("redis unavailable: dashboard snapshot computed locally")
        return snapshot()
    try:
        data = snapshot()
        encoded = orjson.dumps(data)
        try:
            pipe = client.pipeline(transaction=False)
            pipe.set(FRESH_KEY, encoded, px=max(1, int(fresh_for * 1000)))
            pipe.set(LAST_KEY, encoded, ex=60)
            pipe.execute()
        except redis.RedisError:
            logger.warning("redis unavailable: dashboard snapshot not shared")
        return data
    finally:
        try:
            client.delete(LOCK_KEY)
        except redis.RedisError:
            pass  # the lock expires by itself
