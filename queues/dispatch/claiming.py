"""One claim attempt, never waiting: which tasks a claim gets, best first.

Postgres decides every claim (``lifecycle.claim`` confirms ids by primary key
under its guarded statement); Redis only proposes candidates:

* a claim takes ids from the priority lanes (``queues.dispatch.lanes``) and
  confirms them in Postgres; ids that fail (claimed, cancelled, garbage) are
  dropped and the next ones taken; when the lanes run dry or Redis is
  unreachable it falls back to Postgres' own ``SKIP LOCKED`` scan;
* a rate-limited queue dispatches only what its token bucket grants
  (``queues.dispatch.ratelimit``), and nothing at all while Redis is
  unreachable (fail closed).

An attempt that finds nothing reports when a rate-limited queue has its next
token; waiting for work is the caller's business (``workers.longpoll``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from queues import lifecycle
from queues.dispatch import lanes, outage, ratelimit
from queues.models import Queue

Row = dict[str, Any]

#: Rounds of "take ids from the lanes, confirm them" before falling back to Postgres.
LANE_ROUNDS = 3


@dataclass
class Claimed:
    rows: list[Row]
    #: when nothing was claimed because a rate-limited queue had no token: seconds until it has one
    retry_after: float | None = None


def claimable_queues(queue: Queue | None) -> list[Queue]:
    """The queue named (when unpaused), or every unpaused pull queue: push queues' tasks are the pusher's."""
    if queue is not None:
        return [] if queue.paused else [queue]
    return list(Queue.objects.filter(paused=False, push__isnull=True))


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
    #: whether a statement has already scanned the unlimited queues for this claim
    scanned_unlimited: bool = False

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

    def unlimited_ids(self) -> list[uuid.UUID]:
        return [q.id for q in self.queues if q.rate_limit is None]

    def confirm(
        self,
        queue_ids: Sequence[uuid.UUID],
        limit: int,
        task_ids: list[uuid.UUID] | None,
        scan_queue_ids: Sequence[uuid.UUID] = (),
    ) -> None:
        if limit <= 0 or (task_ids is not None and not task_ids and not scan_queue_ids):
            return
        if scan_queue_ids:
            self.scanned_unlimited = True
        moved = lifecycle.claim(self.worker_id, queue_ids, limit, task_ids=task_ids, scan_queue_ids=scan_queue_ids)
        self.rows.extend(moved)
        self.used.update(row["queue_id"] for row in moved)

    def from_lanes(self) -> None:
        """Take the best ids across the lanes, within each queue's allowance, and confirm them."""
        if len(self.queues) == 1 and self.queues[0].rate_limit is None:
            self.from_one_lane(self.queues[0])
            return
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
            queue_ids = [by_name[name].id for name in taken]
            if len(candidates) < need:
                # The lanes hold less than this claim needs: the rest can only come from
                # Postgres, so the same statement scans the unlimited queues for it.
                self.confirm(queue_ids, need, ids, scan_queue_ids=self.unlimited_ids())
                return
            self.confirm(queue_ids, len(ids), ids)

    def from_one_lane(self, queue: Queue) -> None:
        """One queue, no rate limit: its lane's best ids are popped in one call and confirmed."""
        for _ in range(LANE_ROUNDS):
            need = self.need
            if need <= 0:
                return
            popped, ids = lanes.pop(queue.name, need)
            if popped == 0:
                return
            if popped < need:  # the lane ran dry: the same statement scans the queue for the rest
                self.confirm([queue.id], need, ids, scan_queue_ids=[queue.id])
                return
            self.confirm([queue.id], len(ids), ids)

    def from_postgres(self) -> None:
        """The fallback: Postgres' SKIP LOCKED scan, unlimited queues first, then each limited one."""
        unlimited = [] if self.scanned_unlimited else self.unlimited_ids()
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
       When the lanes held fewer ids than wanted, the statement confirming
       them scans the unlimited queues for the rest itself (one round trip).
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
    rows = _best_first(batch.rows)
    return Claimed(rows, min(batch.waits) if batch.waits and not rows else None)


async def claim_one_queue_on_loop(
    worker_id: str, queue: Queue, max_tasks: int, *, most_on_loop: int | None = None
) -> list[Row] | None:
    """:func:`claim` of one named pull queue with no rate limit, on the event loop.

    The same moves as ``_Batch.from_one_lane`` then ``from_postgres`` for
    such a queue (no tokens to take or give back): pop the lane's best ids,
    confirm them by primary key, and when the lane runs dry (or Redis is
    unreachable) scan Postgres for the rest, once.

    A claim of more than ``most_on_loop`` tasks stays on the loop only when
    its lane holds between one and that many ids, a trickle: it takes the
    lane whole and the same statement scans for the rest. Otherwise (a long
    lane, an empty one, Redis unreachable) it answers None, having changed
    nothing: a batch's rows belong on the thread pool.
    """
    assert queue.rate_limit is None and queue.push is None
    if queue.paused:
        return []
    if most_on_loop is not None and max_tasks > most_on_loop:
        return await _claim_short_lane_on_loop(worker_id, queue, max_tasks, most_on_loop)
    rows: list[Row] = []
    scanned = False
    if outage.redis_usable():
        try:
            for _ in range(LANE_ROUNDS):
                need = max_tasks - len(rows)
                if need <= 0:
                    break
                popped, ids = await lanes.pop_on_loop(queue.name, need)
                if popped == 0:
                    break
                if popped < need:  # the lane ran dry: the same statement scans the queue for the rest
                    rows += await lifecycle.claim_on_loop(worker_id, queue, need, task_ids=ids, scan=True)
                    scanned = True
                    break
                if ids:
                    rows += await lifecycle.claim_on_loop(worker_id, queue, len(ids), task_ids=ids)
        except redis.RedisError as exc:
            outage.redis_failed(exc, "reading the lanes")
    if not scanned and len(rows) < max_tasks:
        rows += await lifecycle.claim_on_loop(worker_id, queue, max_tasks - len(rows))
    return _best_first(rows)


async def _claim_short_lane_on_loop(worker_id: str, queue: Queue, max_tasks: int, most: int) -> list[Row] | None:
    if not outage.redis_usable():
        return None
    try:
        short = await lanes.pop_short_on_loop(queue.name, most)
    except redis.RedisError as exc:
        outage.redis_failed(exc, "reading the lanes")
        return None
    if short is None or short[0] == 0:
        return None
    _, ids = short
    # The lane rarely holds every ready task (trimmed, refilled in part, lost with Redis): the
    # statement tops the claim up from the queue, as many as are due up to max_tasks.
    return _best_first(await lifecycle.claim_on_loop(worker_id, queue, max_tasks, task_ids=ids, scan=True))


def _best_first(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda row: (row["priority"], row["scheduled_at"]))
