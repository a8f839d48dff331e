"""Per-queue token buckets, shared by every API process through Redis.

A queue with ``rate_limit`` r and ``rate_burst`` b (b = r when unset) owns a
bucket of capacity b refilled at r tokens per second; it starts full, and a
missing key (never used, expired after refilling, or flushed) is a full
bucket. Each dispatched task costs one token.

The whole read-refill-take is one Lua script using Redis' own clock
(``TIME``): API processes on hosts with skewed clocks still share one
bucket correctly, and no two claims can spend the same token.

When Redis cannot be reached a rate-limited queue gets no token at all (fail
closed): overrunning a downstream's limit is worse than waiting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from queues.models import Queue
from taskforge.infra.redis import redis_client

logger = logging.getLogger("taskforge.ratelimit")


def bucket_key(queue_name: str) -> str:
    return f"tf:{{{queue_name}}}:bucket"


# ARGV: rate (tokens/s), capacity, change (> 0: take up to that many; < 0: give back).
# Returns {granted, wait_ms}: wait_ms is how long until the next whole token
# (0 when one is there). Tokens are fractional; time is in microseconds.
_BUCKET = """
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local change = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
    tokens = capacity
    ts = now
end
if now > ts then
    tokens = math.min(capacity, tokens + (now - ts) * rate / 1000000)
    ts = now
end
tokens = math.min(tokens, capacity)
local granted = 0
if change > 0 then
    granted = math.min(change, math.floor(tokens))
    tokens = tokens - granted
else
    tokens = math.min(capacity, tokens - change)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(ts))
-- Once it would be full again the key carries no information: let it go.
redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - tokens) * 1000 / rate) + 1000)
local wait_ms = 0
if tokens < 1 then
    wait_ms = math.ceil((1 - tokens) * 1000 / rate)
end
return {granted, wait_ms}
"""


@dataclass(frozen=True)
class Grant:
    tokens: int
    #: seconds until the next token (0 when one is left; None when Redis is down)
    retry_after: float | None


_script: redis.commands.core.Script | None = None


def _run(queue: Queue, change: int) -> list[int]:
    global _script
    client = redis_client()
    if _script is None or _script.registered_client is not client:
        _script = client.register_script(_BUCKET)
    burst = queue.effective_burst
    assert queue.rate_limit is not None and burst is not None
    granted_and_wait: list[int] = _script(keys=[bucket_key(queue.name)], args=[queue.rate_limit, burst, change])
    return granted_and_wait


def take(queue: Queue, wanted: int) -> Grant:
    """Take up to ``wanted`` tokens (as many as are there) from the queue's bucket."""
    if queue.rate_limit is None:
        return Grant(wanted, 0.0)
    try:
        granted, wait_ms = _run(queue, wanted)
    except redis.RedisError:
        logger.warning("redis unavailable: rate-limited queue dispatches nothing", extra={"queue": queue.name})
        return Grant(0, None)
    return Grant(int(granted), int(wait_ms) / 1000)


def give_back(queue: Queue, unused: int) -> None:
    """Return tokens a claim took but did not use (fewer tasks confirmed than taken)."""
    if queue.rate_limit is None or unused <= 0:
        return
    try:
        _run(queue, -unused)
    except redis.RedisError:
        # The bucket refills anyway; losing the refund only slows the queue a moment.
        logger.warning("redis unavailable: unused tokens not returned", extra={"queue": queue.name})


def forget(queue_name: str) -> None:
    redis_client().delete(bucket_key(queue_name))
