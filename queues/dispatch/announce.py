"""Announcing ready tasks: the lifecycle calls this after its commit, never before.

New or re-queued pending tasks go into their queue's lane (or the scheduler's
working set when due soon) and the queue's doorbell rings for long-polling
claimers. A crash or Redis error here costs latency only: the dispatcher and
scheduler loops re-read Postgres every tick.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import redis

from queues.dispatch import doorbell, lanes, ratelimit
from queues.dispatch.outage import redis_failed, redis_usable
from queues.models import Queue
from taskforge.infra import redis_pipelines
from taskforge.infra.redis import async_redis_client, redis_client

logger = logging.getLogger("taskforge.dispatch")

Row = dict[str, Any]


def announce(queue: Queue, rows: Sequence[Row]) -> None:
    """Tasks became pending in ``queue``: put them in its lane (or scheduled set), ring.

    No rows means "something changed" (a queue resumed): every waiter on the
    queue is woken and the lane is left to the dispatcher.
    """
    _announce(queue.name, rows, paused=queue.paused, push=queue.push is not None)


async def announce_on_loop(queue: Queue, rows: Sequence[Row]) -> None:
    """:func:`announce`, from the event loop, for rows of ``queue`` (at least one)."""
    client = async_redis_client()
    if client is None:  # a Cluster: its slots are the synchronous client's to know
        await asyncio.get_running_loop().run_in_executor(None, announce, queue, rows)
        return
    ready, later = _entries(rows)
    if not redis_usable():
        return
    try:
        pipe = client.pipeline(transaction=False)
        _queue_commands(pipe, queue.name, ready, later, paused=queue.paused, push=queue.push is not None)
        await redis_pipelines.execute(pipe)
    except redis.RedisError as exc:
        redis_failed(exc, "announcing tasks")


def _announce(queue_name: str, rows: Sequence[Row], *, paused: bool, push: bool | None) -> None:
    if not rows:
        doorbell.ring(queue_name, push=push)
        return
    ready, later = _entries(rows)
    if not redis_usable():
        return
    try:
        pipe = redis_client().pipeline(transaction=False)
        _queue_commands(pipe, queue_name, ready, later, paused=paused, push=push)
        pipe.execute()
    except redis.RedisError as exc:
        # The dispatcher and scheduler re-read Postgres every tick: this costs latency only.
        redis_failed(exc, "announcing tasks")


def _entries(rows: Sequence[Row]) -> tuple[dict[str, int], dict[str, int]]:
    """The lane entries of the pending rows that are due, and the scheduler's of those due soon."""
    ready: dict[str, int] = {}
    later: dict[str, int] = {}
    horizon = timedelta(seconds=lanes.scheduled_horizon_seconds())
    for row in rows:
        if row["status"] != "pending":
            continue
        score = lanes.lane_score(row["priority"], row["scheduled_at"])
        # updated_at is the moving statement's now(): due means due by Postgres' clock.
        if row["scheduled_at"] <= row["updated_at"]:
            ready[str(row["id"])] = score
        elif row["scheduled_at"] <= row["updated_at"] + horizon:
            # Due before the scheduler's next load: straight into its working set.
            later[lanes.scheduled_member(row["id"], score)] = lanes.due_ms(row["scheduled_at"])
    return ready, later


def _queue_commands(
    pipe: Any, queue_name: str, ready: dict[str, int], later: dict[str, int], *, paused: bool, push: bool | None
) -> None:
    """Queue the lane writes and the bell on ``pipe`` (redis-py's, synchronous or asyncio: both queue alike)."""
    if ready:
        lanes.add_ready(pipe, queue_name, ready)
        if not paused:
            doorbell.ring(queue_name, len(ready), push=push, pipe=pipe)  # after the ids are in the lane
    if later:
        lanes.add_scheduled(pipe, queue_name, later)


def settled(task_ids: Sequence[uuid.UUID]) -> None:
    """Tasks became ``done``, ``dead`` or ``cancelled``: ring for requests waiting on their results.

    A lost bell costs the waiting request latency only: it re-reads the task on a timer.
    """
    if not task_ids or not redis_usable():
        return
    try:
        pipe = redis_client().pipeline(transaction=False)
        doorbell.ring_settled([str(task_id) for task_id in task_ids], pipe)
        pipe.execute()
    except redis.RedisError as exc:
        redis_failed(exc, "announcing settled tasks")


async def settled_on_loop(task_ids: Sequence[uuid.UUID]) -> None:
    """:func:`settled`, from the event loop."""
    client = async_redis_client()
    if client is None:  # a Cluster: see announce_on_loop
        await asyncio.get_running_loop().run_in_executor(None, settled, task_ids)
        return
    if not task_ids or not redis_usable():
        return
    try:
        pipe = client.pipeline(transaction=False)
        doorbell.ring_settled([str(task_id) for task_id in task_ids], pipe)  # type: ignore[arg-type]
        await redis_pipelines.execute(pipe)
    except redis.RedisError as exc:
        redis_failed(exc, "announcing settled tasks")


def announce_ids(queue_id: uuid.UUID, rows: Sequence[Row]) -> None:
    """``announce`` for rows of a queue known by its id only (promotions, retry now)."""
    from queues.telemetry.observe import queue_name

    _announce(queue_name(queue_id), rows, paused=False, push=None)  # both bells: one per queue and batch


def forget(queue: Queue) -> None:
    """The queue is gone: drop its Redis keys."""
    try:
        lanes.forget(queue.name)
        ratelimit.forget(queue.name)
    except redis.RedisError:
        logger.warning("redis unavailable while forgetting queue", extra={"queue": queue.name})
