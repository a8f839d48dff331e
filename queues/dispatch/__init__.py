"""Dispatch: which tasks a claim gets, keeping the Redis lanes filled, long polls.

Postgres decides every claim (``lifecycle.claim``). Redis only proposes
candidates (the priority lanes of ``queues.dispatch.lanes``), meters rate-limited
queues (``queues.dispatch.ratelimit``) and rings doorbells (``queues.dispatch.doorbell``):

* a claim takes ids from the lanes and confirms them in Postgres by primary
  key; ids that fail (claimed, cancelled, garbage) are dropped and the next
  ones taken; when the lanes run dry or Redis is unreachable it falls back to
  Postgres' own ``SKIP LOCKED`` scan;
* a rate-limited queue dispatches only what its token bucket grants, and
  nothing at all while Redis is unreachable (fail closed);
* everything written to Redis after a Postgres write happens after the
  commit (``announce`` runs from ``transaction.on_commit``) and is re-derived
  by the dispatcher and scheduler loops, so a crash or a flush in between
  costs at most a tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from asgiref.sync import sync_to_async
from django.db import connection

from queues.dispatch import doorbell, lanes, outage, ratelimit
from queues.models import Queue

logger = logging.getLogger("taskforge.dispatch")

Row = dict[str, Any]

#: Rounds of "take ids from the lanes, confirm them" before falling back to Postgres.
LANE_ROUNDS = 3
#: Ids the dispatcher re-reads per queue each tick even when the lane is full, so a task that
#: missed its lane (Redis blip, trimmed) still overtakes lower priorities within a tick.
HEAD_REFRESH = 20

# --- claiming ------------------------------------------------------------------------------


@dataclass
class Claimed:
    rows: list[Row]
    #: when nothing was claimed because a rate-limited queue had no token: seconds until it has one
    retry_after: float | None = None


def claimable_queues(queue: Queue | None) -> list[Queue]:
    if queue is not None:
        return [] if queue.paused else [queue]
    return list(Queue.objects.filter(paused=False))


@dataclass
class _Batch:
    """One claim call: the tasks confirmed so far and the tokens it holds."""

    worker_id: str
    queues: list[Queue]
    wanted: int
    rows: list[Row] = field(default_factory=list)
    tokens: Counter[uuid.UUID] = field(default_factory=Counter)
    used: Counter[uuid.UUID] = field(default_factory=Counter)
    waits: list[float] = field(default_factory=list)

    @property
    def need(self) -> int:
        return self.wanted - len(self.rows)

    def allowance(self, queue: Queue, count: int) -> int:
        """How many of ``count`` tasks this claim may take from ``queue`` (takes tokens as needed)."""
        if queue.rate_limit is None:
            return count
        held = self.tokens[queue.id] - self.used[queue.id]
        if held < count:
            grant = ratelimit.take(queue, count - held) if outage.redis_usable() else ratelimit.Grant(0, None)
            self.tokens[queue.id] += grant.tokens
            if grant.tokens == 0 and grant.retry_after is not None:
                self.waits.append(grant.retry_after)
            held += grant.tokens
        return min(held, count)

    def confirm(self, queue_ids: Sequence[uuid.UUID], limit: int, task_ids: list[uuid.UUID] | None) -> None:
        from queues import lifecycle

        if limit <= 0 or (task_ids is not None and not task_ids):
            return
        moved = lifecycle.claim(self.worker_id, queue_ids, limit, task_ids=task_ids)
        self.rows.extend(moved)
        self.used.update(row["queue_id"] for row in moved)

    def from_lanes(self) -> None:
        """Take the best ids across the lanes, within each queue's allowance, and confirm them."""
        by_name = {q.name: q for q in self.queues}
        for _ in range(LANE_ROUNDS):
            need = self.need
            if need <= 0:
                return
            candidates = lanes.peek({name: need for name in by_name})
            if not candidates:
                return
            chosen: list[lanes.Candidate] = []
            allowed: dict[str, int] = {}
            taken: Counter[str] = Counter()
            for i, candidate in enumerate(candidates):
                left = need - len(chosen)
                if left <= 0:
                    break
                name = candidate.queue_name
                if name not in allowed:
                    # Tokens for at most what this round could still take from the queue.
                    upper = sum(1 for c in candidates[i : i + left] if c.queue_name == name)
                    allowed[name] = self.allowance(by_name[name], upper)
                if taken[name] < allowed[name]:
                    taken[name] += 1
                    chosen.append(candidate)
            if not chosen:
                return
            ids = lanes.remove(chosen)
            self.confirm([by_name[name].id for name in taken], len(ids), ids)

    def from_postgres(self) -> None:
        """The fallback: Postgres' SKIP LOCKED scan, unlimited queues first, then each limited one."""
        unlimited = [q.id for q in self.queues if q.rate_limit is None]
        if unlimited:
            self.confirm(unlimited, self.need, None)
        for queue in self.queues:
            if queue.rate_limit is not None and self.need > 0:
                self.confirm([queue.id], self.allowance(queue, self.need), None)

    def give_back(self) -> None:
        for queue in self.queues:
            if queue.rate_limit is not None:
                ratelimit.give_back(queue, self.tokens[queue.id] - self.used[queue.id])


def claim(worker_id: str, queue: Queue | None, max_tasks: int) -> Claimed:
    """One claim attempt, no waiting: up to ``max_tasks`` tasks, best first.

    1. Candidates come from the Redis lanes (best score across the queues),
       within each rate-limited queue's tokens; Postgres confirms them.
    2. What is still missing comes from Postgres directly (lanes empty or
       stale, Redis down): unlimited queues always, limited ones only with
       tokens, so a rate limit holds even while Redis is down (nothing moves).
    3. Tokens taken but not used are returned.
    """
    batch = _Batch(worker_id, claimable_queues(queue), max_tasks)
    if not batch.queues:
        return Claimed([])
    try:
        if outage.redis_usable():
            try:
                batch.from_lanes()
            except redis.RedisError as exc:
                outage.redis_failed(exc, "reading the lanes")
        if batch.need > 0:
            batch.from_postgres()
    finally:
        batch.give_back()
    rows = sorted(batch.rows, key=lambda row: (row["priority"], row["scheduled_at"]))
    return Claimed(rows, min(batch.waits) if batch.waits and not rows else None)


# --- long polling ---------------------------------------------------------------------------


def release_connection() -> None:
    """Hand the database connection back to the pool while a claim waits.

    Inside a test's transaction the connection must stay (closing it would
    end the test's transaction).
    """
    if not connection.in_atomic_block:
        connection.close()


def _claim_again(worker_id: str, queue_id: uuid.UUID | None, max_tasks: int, fresh: Queue | None) -> Claimed | None:
    """A claim attempt of a long poll; None when the queue was deleted meanwhile."""
    try:
        queue = fresh
        if queue is None and queue_id is not None:
            queue = Queue.objects.filter(pk=queue_id).first()  # paused / rate limit may have changed
            if queue is None:
                return None
        return claim(worker_id, queue, max_tasks)
    finally:
        release_connection()


async def claim_waiting(worker_id: str, queue: Queue | None, max_tasks: int, wait_seconds: float) -> list[Row]:
    """Claim up to ``max_tasks``, waiting up to ``wait_seconds`` for claimable tasks.

    Runs on the event loop: the wait is an ``asyncio`` event set by the
    process's doorbell hub; between attempts it holds no database connection.

    1. Register with the hub (subscribed to the doorbell channel) before the
       first attempt, so a bell that rings after the attempt is never lost.
    2. Wait for a bell, for a rate-limited queue's next token, or for the
       re-check timer (a safety net for a lost bell), then claim again; clear
       the event before each attempt so a bell during the attempt counts.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_seconds
    attempt = sync_to_async(_claim_again)
    queue_id = queue.id if queue is not None else None
    fresh = queue  # the caller just read it: the first attempt needs no second read
    hub = doorbell.hub()
    async with hub.waiter(queue.name if queue is not None else None, max_tasks) as waiter:
        while True:
            waiter.event.clear()
            claimed = await attempt(worker_id, queue_id, max_tasks, fresh)
            fresh = None
            if claimed is None:
                return []
            if claimed.rows:
                return claimed.rows
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            timeout = min(remaining, hub.recheck_seconds)
            if claimed.retry_after is not None:
                timeout = min(timeout, max(claimed.retry_after, 0.01))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.event.wait(), timeout)


# --- the dispatcher: keeping the lanes filled ---------------------------------------------

# The best due pending tasks of each queue, at most ``lim`` per queue: an
# ordered range scan of the partial index tf_task_ready per queue, never a
# copy of the table.
_READY_HEADS = """
SELECT w.name, t.id, t.priority, t.scheduled_at
FROM unnest(%(queue_ids)s::uuid[], %(names)s::text[], %(limits)s::int[]) AS w(queue_id, name, lim)
CROSS JOIN LATERAL (
    SELECT t.id, t.priority, t.scheduled_at
    FROM tf_task t
    WHERE t.queue_id = w.queue_id AND t.status = 'pending' AND t.scheduled_at <= now()
    ORDER BY t.priority, t.scheduled_at
    LIMIT w.lim
) t
"""


def refill_lanes() -> int:
    """One dispatcher tick: top up the lane of every unpaused queue; return how many ids were new.

    1. Lanes below the low-water mark are filled up to their capacity; the
       others get their head re-read (a task that missed its lane overtakes
       lower priorities within a tick).
    2. ``ZADD`` is idempotent, so two dispatchers, or a dispatcher racing an
       announce, only rewrite the same scores. Ids claimed meanwhile are
       garbage a claim drops.
    3. A queue whose lane gained ids rings its doorbell.
    """
    queues = list(Queue.objects.filter(paused=False).values_list("id", "name"))
    if not queues:
        return 0
    names = [name for _, name in queues]
    limits = [lanes.LANE_CAPACITY if size < lanes.LANE_LOW_WATER else HEAD_REFRESH for size in lanes.sizes(names)]
    with connection.cursor() as cursor:
        cursor.execute(_READY_HEADS, {"queue_ids": [qid for qid, _ in queues], "names": names, "limits": limits})
        found = cursor.fetchall()
    entries: dict[str, dict[str, int]] = {}
    for name, task_id, priority, scheduled_at in found:
        entries.setdefault(name, {})[str(task_id)] = lanes.lane_score(priority, scheduled_at)
    if not entries:
        return 0
    pipe = lanes.redis_client().pipeline(transaction=False)
    for name, ids in entries.items():
        lanes.add_ready(pipe, name, ids)
    results = pipe.execute()
    added_total = 0
    for name, added in zip(entries, results[0::2], strict=True):
        if added:
            added_total += int(added)
            doorbell.ring(name, int(added))
    return added_total
