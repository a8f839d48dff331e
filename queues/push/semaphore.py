"""``max_concurrent`` across every pusher process: a counting semaphore per queue in Redis.

A queue's slots are a sorted set ``tf:{queue}:push:slots`` of slot ids scored by when they
lapse (Redis time, ms). A pusher takes slots before it claims, gives back the ones its claim
did not use, renews the ones it holds about every second, and releases each when its delivery
ends: a pass hands the slots of the deliveries it recorded back in the same call that takes
the next ones, one round trip per queue and pass, not per delivery. A pusher that dies stops
renewing, so its slots lapse after ``ttl`` (the lease time: its deliveries' leases lapse then
too, and the watchdog retries them).

Redis is a rebuildable buffer here too: after a flush or a restart the set is empty while
deliveries are still in flight. The marker ``tf:{queue}:push:counted`` says from when the set
can be trusted; when it is missing the first taker sets it to now + ``settle`` and no slot is
handed out until then, by which time every live pusher has renewed (re-added) what it holds.
While Redis is unreachable no slot is handed out (fail closed, like rate limits): deliveries in
flight finish, new ones wait.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import redis

from taskforge.infra.redis import redis_client

#: How long after a Redis loss slots stay closed: must exceed the renew interval (pusher: 1 s).
SETTLE_MS = 3000


def slots_key(queue_name: str) -> str:
    return f"tf:{{{queue_name}}}:push:slots"


def counted_key(queue_name: str) -> str:
    return f"tf:{{{queue_name}}}:push:counted"


# KEYS: slots, counted. ARGV: limit, ttl_ms, settle_ms, how many ids are released, the slot ids
# released..., the slot ids wanted... Releases first (even while the set is not yet trusted), then
# returns how many of the wanted ids were added (the first ones).
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local released = tonumber(ARGV[4])
for i = 5, 4 + released do
    redis.call('ZREM', KEYS[1], ARGV[i])
end
local counted_from = tonumber(redis.call('GET', KEYS[2]))
if counted_from == nil then
    redis.call('SET', KEYS[2], tostring(now + tonumber(ARGV[3])))
    return 0
end
if now < counted_from then
    return 0
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local free = limit - redis.call('ZCARD', KEYS[1])
local first = 5 + released
local wanted = #ARGV - first + 1
local granted = math.max(0, math.min(free, wanted))
for i = 0, granted - 1 do
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[first + i])
end
return granted
"""

# KEYS: slots. ARGV: ttl_ms, slot ids held... Re-adds them (after a flush) with a fresh lapse time.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 2, #ARGV do
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i])
end
return #ARGV - 1
"""

# KEYS: slots. Slots not lapsed (the in-flight gauge).
_COUNT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], now, '+inf')
"""

_scripts: dict[str, redis.commands.core.Script] = {}


def _script(source: str) -> redis.commands.core.Script:
    client = redis_client()
    script = _scripts.get(source)
    if script is None or script.registered_client is not client:
        script = _scripts[source] = client.register_script(source)
    return script


def take(queue_name: str, wanted: int, *, limit: int, ttl_ms: int, releasing: Sequence[str] = ()) -> list[str]:
    """Release ``releasing``, then take up to ``wanted`` slot ids of the queue (fewer when ``limit``
    are taken), in one round trip; raises RedisError (then nothing was released either)."""
    if wanted <= 0:
        release(queue_name, releasing)
        return []
    ids = [uuid.uuid4().hex for _ in range(wanted)]
    keys = [slots_key(queue_name), counted_key(queue_name)]
    granted = int(_script(_TAKE)(keys=keys, args=[limit, ttl_ms, SETTLE_MS, len(releasing), *releasing, *ids]))
    return ids[:granted]


def renew(queue_name: str, slot_ids: Sequence[str], *, ttl_ms: int) -> None:
    if slot_ids:
        _script(_RENEW)(keys=[slots_key(queue_name)], args=[ttl_ms, *slot_ids])


def release(queue_name: str, slot_ids: Sequence[str]) -> None:
    if slot_ids:
        redis_client().zrem(slots_key(queue_name), *slot_ids)


def in_flight(queue_name: str) -> int:
    return int(_script(_COUNT)(keys=[slots_key(queue_name)]))
