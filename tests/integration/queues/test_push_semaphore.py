"""``max_concurrent`` in Redis: slots taken, given back, lapsing, and rebuilt after a flush."""

from __future__ import annotations

import time

import pytest

from queues.push import semaphore
from taskforge.infra.redis import redis_client

TTL_MS = 30_000


def settled(queue: str) -> None:
    """Past the settle time of a fresh Redis (the marker is set by the first take)."""
    assert semaphore.take(queue, 1, limit=5, ttl_ms=TTL_MS) == []
    redis_client().set(semaphore.counted_key(queue), "0")


def test_a_fresh_redis_hands_out_nothing_until_it_settled() -> None:
    assert semaphore.take("q", 3, limit=5, ttl_ms=TTL_MS) == []
    time.sleep(semaphore.SETTLE_MS / 1000 + 0.1)
    assert len(semaphore.take("q", 3, limit=5, ttl_ms=TTL_MS)) == 3


def test_slots_stop_at_the_limit_and_come_back_when_released() -> None:
    settled("q")
    first = semaphore.take("q", 4, limit=5, ttl_ms=TTL_MS)
    second = semaphore.take("q", 4, limit=5, ttl_ms=TTL_MS)
    assert (len(first), len(second)) == (4, 1)
    assert semaphore.take("q", 1, limit=5, ttl_ms=TTL_MS) == []
    assert semaphore.in_flight("q") == 5
    semaphore.release("q", first[:2])
    assert len(semaphore.take("q", 5, limit=5, ttl_ms=TTL_MS)) == 2
    assert semaphore.take("other", 1, limit=5, ttl_ms=TTL_MS) == [], "queues count apart (and settle apart)"


def test_slots_of_a_holder_that_stopped_renewing_lapse() -> None:
    settled("q")
    assert len(semaphore.take("q", 2, limit=2, ttl_ms=300)) == 2
    assert semaphore.take("q", 1, limit=2, ttl_ms=300) == []
    time.sleep(0.4)
    assert len(semaphore.take("q", 2, limit=2, ttl_ms=TTL_MS)) == 2


def test_renewing_keeps_slots_held() -> None:
    settled("q")
    held = semaphore.take("q", 2, limit=2, ttl_ms=300)
    for _ in range(3):
        time.sleep(0.2)
        semaphore.renew("q", held, ttl_ms=300)
    assert semaphore.take("q", 1, limit=2, ttl_ms=300) == []


@pytest.mark.parametrize("loss", ["flushdb", "keys deleted"])
def test_after_a_redis_loss_holders_re_add_their_slots_before_any_is_handed_out(loss: str) -> None:
    settled("q")
    held = semaphore.take("q", 5, limit=5, ttl_ms=TTL_MS)
    if loss == "flushdb":
        redis_client().flushdb()
    else:
        redis_client().delete(semaphore.slots_key("q"), semaphore.counted_key("q"))
    assert semaphore.take("q", 5, limit=5, ttl_ms=TTL_MS) == [], "closed while holders re-add what they hold"
    semaphore.renew("q", held, ttl_ms=TTL_MS)  # a live pusher's renewal, within a second
    time.sleep(semaphore.SETTLE_MS / 1000 + 0.1)
    assert semaphore.take("q", 5, limit=5, ttl_ms=TTL_MS) == [], "the limit still holds"
    semaphore.release("q", held[:1])
    assert len(semaphore.take("q", 5, limit=5, ttl_ms=TTL_MS)) == 1
