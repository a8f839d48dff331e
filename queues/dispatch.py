"""Dispatch: which tasks a claim gets, and waking long-polling workers.

Postgres decides every claim (``lifecycle.claim``); this module chooses the
candidate queues and signals waiters through Redis. Redis is only a cache and
a doorbell here: when it is down, claims fall back to Postgres alone.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

import redis

from queues.models import Queue
from taskforge.redis import redis_client

logger = logging.getLogger("taskforge.dispatch")


def _wake_key(queue_name: str) -> str:
    return f"tf:{{{queue_name}}}:wake"


ANY_QUEUE_WAKE_KEY = "tf:wake"


def announce(queue: Queue, rows: Sequence[dict[str, Any]]) -> None:
    """Ready tasks arrived in ``queue``: wake long-polling claimers."""
    _ring(queue.name)


def announce_ids(queue_id: uuid.UUID, rows: Sequence[dict[str, Any]]) -> None:
    from queues.observe import queue_name

    _ring(queue_name(queue_id))


def forget(queue: Queue) -> None:
    """The queue is gone: drop its Redis keys."""
    try:
        redis_client().delete(_wake_key(queue.name))
    except redis.RedisError:
        logger.warning("redis unavailable while forgetting queue", extra={"queue": queue.name})


def _ring(queue_name: str) -> None:
    try:
        pipe = redis_client().pipeline(transaction=False)
        pipe.publish(_wake_key(queue_name), b"1")
        pipe.publish(ANY_QUEUE_WAKE_KEY, b"1")
        pipe.execute()
    except redis.RedisError:
        # Waiters also re-check on a short timer, so a lost doorbell costs latency, not tasks.
        logger.warning("redis unavailable: long-poll wakeup skipped", extra={"queue": queue_name})


def claimable_queues(queue: Queue | None) -> list[Queue]:
    if queue is not None:
        return [] if queue.paused else [queue]
    return list(Queue.objects.filter(paused=False))


def claim(worker_id: str, queue: Queue | None, max_tasks: int) -> list[dict[str, Any]]:
    """One claim attempt, no waiting."""
    from queues import lifecycle

    queues = claimable_queues(queue)
    return lifecycle.claim(worker_id, [q.id for q in queues], max_tasks)


def claim_waiting(worker_id: str, queue: Queue | None, max_tasks: int, wait_seconds: int) -> list[dict[str, Any]]:
    """Claim, and if nothing is there wait up to ``wait_seconds`` for a doorbell."""
    deadline = time.monotonic() + wait_seconds
    channel = _wake_key(queue.name) if queue is not None else ANY_QUEUE_WAKE_KEY
    pubsub = None
    try:
        while True:
            claimed = claim(worker_id, queue, max_tasks)
            remaining = deadline - time.monotonic()
            if claimed or remaining <= 0:
                return claimed
            if pubsub is None:
                try:
                    pubsub = redis_client().pubsub(ignore_subscribe_messages=True)
                    pubsub.subscribe(channel)
                    continue  # re-check: a task may have arrived before we subscribed
                except redis.RedisError:
                    pubsub = None
            # Delayed tasks become due without a doorbell: never sleep longer than a tick.
            slice_seconds = min(remaining, 0.5)
            if pubsub is not None:
                try:
                    pubsub.get_message(timeout=slice_seconds)
                except redis.RedisError:
                    pubsub = None
                    time.sleep(slice_seconds)
            else:
                time.sleep(slice_seconds)
    finally:
        if pubsub is not None:
            try:
                pubsub.close()
            except redis.RedisError:
                pass
