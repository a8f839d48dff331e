"""The scheduler's work: delayed tasks and retries become claimable on time.

Two tiers. Every ``TASKFORGE_SCHEDULER_TICK`` the slow tier reads Postgres:
it promotes due retries (``lifecycle.promote_due``) and copies every task due
within the next ``lanes.scheduled_horizon_seconds()`` (delayed pending tasks and retries)
into the queue's Redis scheduled set, scored by due time. Many times a second
the fast tier, Redis only, moves what is due into the ready lanes (one Lua
script per queue, by Redis' clock) and rings the doorbell, so a long-polling
worker claims a task within a fraction of a second of its ``scheduled_at``.
A due retry is promoted in Postgres at that moment, and its announce puts it
in the lane.

Both tiers are safe with several schedulers running (the moves are atomic
scripts, the promotion is a guarded ``SKIP LOCKED`` update) and after a
flush (the slow tier re-derives the sets from Postgres within a tick).
Claims never run ahead of time: the claim statement itself checks
``scheduled_at <= now()``.

``run_once`` is one pass of the loop: the fast tier every time, the slow tier
when the caller says it is due (every ``TASKFORGE_SCHEDULER_TICK``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import redis
from django.db import connection

from queues import lifecycle
from queues.dispatch import doorbell, lanes
from taskforge.infra.redis import redis_client

logger = logging.getLogger("taskforge.schedule")

#: The fast tier's period: Redis only, so it can run far more often than the Postgres tier.
FAST_TICK_SECONDS = 0.05
PROMOTE_BATCH = 1000
#: Most entries copied per queue (and retries overall) per slow tick; the rest follow
#: as the earlier ones move out (they are due later, by the order of the scan).
LOAD_LIMIT = 5000
_PRIORITIES = list(range(1, 11))


def promote_due() -> int:
    """Move due retries to pending (their announce puts them in the lanes and rings)."""
    return len(lifecycle.promote_due(PROMOTE_BATCH))


# Pending tasks not yet due and retries, due within the horizon. The pending
# part runs per queue on the (queue, priority, scheduled_at) partial index
# with one range descent per priority, so a large backlog of due tasks is
# never scanned; the retry part uses the retry index on scheduled_at.
_DUE_SOON = """
(SELECT q.name, t.id, t.priority, t.scheduled_at, false AS is_retry
 FROM tf_queue q CROSS JOIN LATERAL (
     SELECT t.id, t.priority, t.scheduled_at
     FROM tf_task t
     WHERE t.queue_id = q.id AND t.status = 'pending' AND t.priority = ANY(%(priorities)s::smallint[])
           AND t.scheduled_at > now() AND t.scheduled_at <= now() + make_interval(secs => %(horizon)s)
     ORDER BY t.scheduled_at
     LIMIT %(limit)s
 ) t)
UNION ALL
(SELECT q.name, t.id, t.priority, t.scheduled_at, true AS is_retry
 FROM tf_task t JOIN tf_queue q ON q.id = t.queue_id
 WHERE t.status = 'retry' AND t.scheduled_at <= now() + make_interval(secs => %(horizon)s)
 ORDER BY t.scheduled_at
 LIMIT %(limit)s)
"""


def load_due_soon() -> int:
    """The slow tier's copy: tasks due within the horizon into the scheduled sets."""
    with connection.cursor() as cursor:
        cursor.execute(
            _DUE_SOON, {"priorities": _PRIORITIES, "horizon": lanes.scheduled_horizon_seconds(), "limit": LOAD_LIMIT}
        )
        found = cursor.fetchall()
    entries: dict[str, dict[str, int]] = {}
    for name, task_id, priority, scheduled_at, is_retry in found:
        member = (
            lanes.retry_member(task_id)
            if is_retry
            else lanes.scheduled_member(task_id, lanes.lane_score(priority, scheduled_at))
        )
        entries.setdefault(name, {})[member] = lanes.due_ms(scheduled_at)
    pipe = redis_client().pipeline(transaction=False)
    for name, members in entries.items():
        lanes.add_scheduled(pipe, name, members)
    pipe.execute()
    return len(found)


def move_due() -> int:
    """The fast tier: due entries into the lanes, doorbells rung; due retries promoted."""
    moved = retries_due = 0
    for name in lanes.scheduled_queues():
        into_lane, retries = lanes.move_due(name)
        if into_lane:
            doorbell.ring(name, into_lane, push=None)  # known by name only: both bells, one per queue and tick
        moved += into_lane
        retries_due += retries
    if retries_due:
        moved += promote_due()
    return moved


@dataclass(frozen=True)
class Pass:
    """What one pass of the scheduler did."""

    #: slow tier: due retries promoted in Postgres
    promoted: int = 0
    #: slow tier: entries copied into the scheduled sets
    loaded: int = 0
    #: fast tier: entries moved into the lanes, plus the due retries it promoted
    moved: int = 0

    @property
    def handled(self) -> int:
        return self.promoted + self.loaded + self.moved

    @property
    def full_batch(self) -> bool:
        """A full promotion batch: more retries are due, so the slow tier should run again at once."""
        return self.promoted >= PROMOTE_BATCH


def slow_tier() -> Pass:
    """Postgres first (it must work without Redis), then the Redis copy."""
    promoted = promote_due()
    loaded = 0
    try:
        loaded = load_due_soon()
        lanes.drop_idle_scheduled_queues(lanes.scheduled_queues())
    except redis.RedisError as exc:
        logger.warning("redis unavailable: scheduled sets not loaded: %s", exc, extra={"event": "schedule.redis_down"})
    return Pass(promoted=promoted, loaded=loaded)


def slow_tick() -> int:
    return slow_tier().handled


def fast_tick() -> int:
    try:
        return move_due()
    except redis.RedisError:
        # Claims fall back to Postgres meanwhile; the slow tier still promotes retries.
        return 0


def run_once(*, slow: bool) -> Pass:
    """One pass: the slow tier when it is due, then the fast tier."""
    return replace(slow_tier() if slow else Pass(), moved=fast_tick())
