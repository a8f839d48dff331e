"""The Redis side of dispatch: per-queue priority lanes and scheduled sets.

Redis holds only task ids here, never a task: Postgres decides every claim,
so anything in these sets may be stale (claimed, cancelled, deleted) or even
garbage, and a claim simply drops ids that fail to confirm. Everything can be
flushed at any moment; the dispatcher and scheduler rebuild it from Postgres.

Keys carry the queue name in a hash tag, so every script touches one cluster
slot:

* ``tf:{<queue>}:ready``: sorted set of due task ids, scored by
  :func:`lane_score` (lower priority number first, then oldest
  ``scheduled_at``). Bounded by :data:`LANE_CAPACITY`.
* ``tf:{<queue>}:scheduled``: sorted set of tasks due soon, scored by due
  time (Unix ms); members ``"<lane score>|<task id>"`` for delayed pending
  tasks (so the move into the lane needs no Postgres) and ``"r|<task id>"``
  for retries (which Postgres must promote first).
* ``tf:scheduled-queues``: names of queues whose scheduled set may hold
  entries, so the scheduler's fast path need not visit every queue.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from django.conf import settings

from taskforge.infra import redis_pipelines
from taskforge.infra.redis import Pipeline, async_redis_client, redis_client

#: Most ids kept per lane: a buffer for the next claims, not a copy of the table.
LANE_CAPACITY = 500
#: Below this many ids the dispatcher refills a lane up to LANE_CAPACITY.
LANE_LOW_WATER = 100

SCHEDULED_QUEUES_KEY = "tf:scheduled-queues"

# Lane scores must stay exact in a double (53 bits). Time counts in 10 µs
# ticks since 2024 and each priority owns a band of 9e14 ticks (~285 years):
# (10 - 1) * 9e14 + 9e14 = 9e15 < 2**53, so no two instants ever collide.
_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
_TICKS_PER_SECOND = 100_000
_PRIORITY_BAND = 9 * 10**14


def scheduled_horizon_seconds() -> float:
    """How far ahead tasks enter the scheduled sets: more than a scheduler tick, so none enters late."""
    return 2.0 * settings.TASKFORGE_SCHEDULER_TICK + 1.0


def ready_key(queue_name: str) -> str:
    return f"tf:{{{queue_name}}}:ready"


def scheduled_key(queue_name: str) -> str:
    return f"tf:{{{queue_name}}}:scheduled"


def lane_score(priority: int, scheduled_at: datetime) -> int:
    delta = scheduled_at - _EPOCH
    ticks = (delta.days * 86_400 + delta.seconds) * _TICKS_PER_SECOND + delta.microseconds // 10
    return (priority - 1) * _PRIORITY_BAND + min(max(ticks, 0), _PRIORITY_BAND - 1)


def due_ms(scheduled_at: datetime) -> int:
    return int(scheduled_at.timestamp() * 1000)


def parse_ids(members: Iterable[bytes | str]) -> list[uuid.UUID]:
    """Task ids from lane members; anything that is not a UUID is ignored."""
    ids = []
    for member in members:
        try:
            ids.append(uuid.UUID(member.decode() if isinstance(member, bytes) else member))
        except (ValueError, UnicodeDecodeError):
            continue
    return ids


# --- writing the lanes ----------------------------------------------------------------


def add_ready(pipe: Pipeline, queue_name: str, entries: dict[str, int]) -> None:
    """Queue ``ZADD`` + trim on ``pipe``: the lane keeps its best LANE_CAPACITY ids.

    The trim drops the worst-ranked ids (lowest priority, newest): they are
    still pending in Postgres and come back with the next refill.
    """
    key = ready_key(queue_name)
    pipe.zadd(key, entries)
    pipe.zremrangebyrank(key, LANE_CAPACITY, -1)


def add_scheduled(pipe: Pipeline, queue_name: str, entries: dict[str, int]) -> None:
    """Queue the not-yet-due ``{"<lane score>|<id>": due_ms}`` entries on ``pipe``."""
    pipe.zadd(scheduled_key(queue_name), entries)
    pipe.sadd(SCHEDULED_QUEUES_KEY, queue_name)


def scheduled_member(task_id: uuid.UUID, score: int) -> str:
    return f"{score}|{task_id}"


def retry_member(task_id: uuid.UUID) -> str:
    return f"r|{task_id}"


# --- reading the lanes -------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Candidate:
    score: float
    member: bytes
    queue_name: str


def peek(limits: dict[str, int]) -> list[Candidate]:
    """The heads of several lanes (at most ``limits[q]`` ids of lane q), best first.

    The score orders priority first and time second, so merging lanes by
    score gives the cross-queue order of a claim without a queue.
    """
    names = [name for name, limit in limits.items() if limit > 0]
    if not names:
        return []
    pipe = redis_client().pipeline(transaction=False)
    for name in names:
        pipe.zrange(ready_key(name), 0, limits[name] - 1, withscores=True)
    heads = pipe.execute()
    return sorted(
        Candidate(score, member, name) for name, head in zip(names, heads, strict=True) for member, score in head
    )


def remove(chosen: Sequence[Candidate]) -> list[uuid.UUID]:
    """``ZREM`` the chosen ids; return those this call removed (and that are UUIDs).

    Two claimers that peeked the same head never both try one id: only the
    one whose ``ZREM`` removed it goes on to confirm it in Postgres (which
    would refuse the second anyway; this only saves it the work).
    """
    if not chosen:
        return []
    pipe = redis_client().pipeline(transaction=False)
    for candidate in chosen:
        pipe.zrem(ready_key(candidate.queue_name), candidate.member)
    removed = pipe.execute()
    return parse_ids(c.member for c, won in zip(chosen, removed, strict=True) if won)


def pop(queue_name: str, count: int) -> tuple[int, list[uuid.UUID]]:
    """``ZPOPMIN``: take the best ``count`` ids of one lane in one call.

    For a claim of one queue with no rate limit there is nothing to merge
    across lanes and nothing to ration, so peeking and then removing (two
    round trips) would take exactly these. Returns how many members it took
    (garbage included, which is dropped) and the task ids among them.
    """
    popped: list[tuple[bytes, float]] = redis_client().zpopmin(ready_key(queue_name), count)  # type: ignore[assignment]
    return len(popped), parse_ids(member for member, _ in popped)


async def pop_on_loop(queue_name: str, count: int) -> tuple[int, list[uuid.UUID]]:
    """:func:`pop`, from the event loop (a Cluster's lanes stay the synchronous client's: see announce_on_loop)."""
    client = async_redis_client()
    if client is None:
        return await asyncio.get_running_loop().run_in_executor(None, pop, queue_name, count)
    pipe = client.pipeline(transaction=False)
    pipe.zpopmin(ready_key(queue_name), count)
    (popped,) = await redis_pipelines.execute(pipe)
    # The raw reply: members and scores in one list (RESP2), or [member, score] pairs (RESP3).
    members = [pair[0] for pair in popped] if popped and isinstance(popped[0], list) else popped[::2]
    return len(members), parse_ids(members)


# Take a short lane whole: every id when it holds at most ARGV[1] of them, else
# nothing (atomically, so no claimer takes part of a lane this one judged short).
# Returns {ids the lane held, the members taken...}.
_POP_SHORT = """
local held = redis.call('ZCARD', KEYS[1])
if held > tonumber(ARGV[1]) then
    return {held}
end
local taken = redis.call('ZPOPMIN', KEYS[1], held)
local reply = {held}
for i = 1, #taken, 2 do
    reply[#reply + 1] = taken[i]
end
return reply
"""


def pop_short(queue_name: str, most: int) -> tuple[int, list[uuid.UUID]] | None:
    """Every id of a lane that holds at most ``most``: (how many it held, the task ids among them); None, taking
    nothing, when it holds more."""
    return _short_lane(redis_client().eval(_POP_SHORT, 1, ready_key(queue_name), most))


async def pop_short_on_loop(queue_name: str, most: int) -> tuple[int, list[uuid.UUID]] | None:
    """:func:`pop_short`, from the event loop (a Cluster's lanes stay the synchronous client's)."""
    client = async_redis_client()
    if client is None:
        return await asyncio.get_running_loop().run_in_executor(None, pop_short, queue_name, most)
    pipe = client.pipeline(transaction=False)
    pipe.eval(_POP_SHORT, 1, ready_key(queue_name), most)
    (reply,) = await redis_pipelines.execute(pipe)
    return _short_lane(reply)


def _short_lane(reply: list[Any]) -> tuple[int, list[uuid.UUID]] | None:
    held, *members = reply
    return None if len(members) < int(held) else (int(held), parse_ids(members))


def sizes(queue_names: Sequence[str]) -> list[int]:
    pipe = redis_client().pipeline(transaction=False)
    for name in queue_names:
        pipe.zcard(ready_key(name))
    return [int(n) for n in pipe.execute()]


# --- the scheduled sets ----------------------------------------------------------------------

# Move every due entry of one queue's scheduled set into its lane, by Redis'
# clock, atomically (two scheduler replicas can never move one entry twice).
# Retry entries ("r|<id>") are only removed and counted: a retry must be
# promoted in Postgres first, and its announce then fills the lane.
# Returns {moved into the lane, retries due}.
_MOVE_DUE = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[1]))
local moved, retries = 0, 0
for _, member in ipairs(due) do
    local sep = string.find(member, '|', 1, true)
    if sep then
        local head = string.sub(member, 1, sep - 1)
        if head == 'r' then
            retries = retries + 1
        elseif tonumber(head) then
            redis.call('ZADD', KEYS[2], head, string.sub(member, sep + 1))
            moved = moved + 1
        end
    end
    redis.call('ZREM', KEYS[1], member)
end
if moved > 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[2], tonumber(ARGV[2]), -1)
end
return {moved, retries}
"""

_move_due_script: redis.commands.core.Script | None = None


def move_due(queue_name: str, limit: int = 1000) -> tuple[int, int]:
    """Move the queue's due scheduled entries into its lane: (moved, retries now due)."""
    global _move_due_script
    client = redis_client()
    if _move_due_script is None or _move_due_script.registered_client is not client:
        _move_due_script = client.register_script(_MOVE_DUE)
    moved, retries = _move_due_script(
        keys=[scheduled_key(queue_name), ready_key(queue_name)], args=[limit, LANE_CAPACITY]
    )
    return int(moved), int(retries)


def scheduled_queues() -> list[str]:
    members = redis_client().smembers(SCHEDULED_QUEUES_KEY)
    return sorted(m.decode() if isinstance(m, bytes) else m for m in members)


def drop_idle_scheduled_queues(queue_names: Iterable[str]) -> None:
    """Forget queues whose scheduled set is empty (the next load re-adds any that refill)."""
    client = redis_client()
    names = list(queue_names)
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.zcard(scheduled_key(name))
    idle = [name for name, n in zip(names, pipe.execute(), strict=True) if not n]
    if idle:
        client.srem(SCHEDULED_QUEUES_KEY, *idle)


def forget(queue_name: str) -> None:
    """The queue is gone: drop its keys."""
    client = redis_client()
    pipe = client.pipeline(transaction=False)
    # One DEL per key: a Cluster pipeline refuses a multi-key DEL (even within one slot).
    pipe.delete(ready_key(queue_name))
    pipe.delete(scheduled_key(queue_name))
    pipe.srem(SCHEDULED_QUEUES_KEY, queue_name)
    pipe.execute()
