# ruff: noqa: F403  (the imported tests and fixtures are what pytest collects here)
"""The acceptance tests of the task protocol, run unchanged through Redis Sentinel.

Every Redis user of this process, and of any server a test starts, finds the
primary by asking the three sentinels (``REDIS_URL=redis+sentinel://...``):
the lanes, token buckets, doorbell, counters, caches and Django's cache all
go through the Sentinel-aware clients.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from faults.engines import SentinelRedis
from tests.conftest import redis_at
from tests.integration.acceptance import *

pytestmark = [pytest.mark.django_db, pytest.mark.xdist_group("sentinel")]


@pytest.fixture
def redis_db(shared_sentinels: SentinelRedis, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with redis_at(shared_sentinels.url(0), monkeypatch):
        yield


def test_this_process_talks_to_the_primary_the_sentinels_name(shared_sentinels):
    from taskforge.infra.redis import redis_client

    redis_client().set("tf:probe", "through-sentinel")
    assert shared_sentinels.client().get("tf:probe") == b"through-sentinel"


def test_the_change_watch_subscribes_on_the_primary_the_sentinels_name(shared_sentinels):
    from taskforge.infra import change_watch, rowcache
    from taskforge.infra.redis import redis_client
    from tests.push_receiver import wait_until

    watch = change_watch.current()
    assert watch is not None and watch.wait_listening(5.0)
    names = [c["name"] for c in shared_sentinels.client().client_list()]
    assert watch.client_name in names  # subscribed on the primary itself
    before = watch.heard()
    change_watch.announce(redis_client(), rowcache.GENERATION_KEY)
    wait_until(lambda: watch.heard() not in (None, before), 2.0, interval=0.01)


def test_the_event_loops_client_talks_to_the_primary_the_sentinels_name(shared_sentinels):
    """The client single enqueues announce through on the event loop (taskforge.infra.redis)."""
    import asyncio

    from taskforge.infra.redis import async_redis_client

    async def probe() -> None:
        client = async_redis_client()
        assert client is not None
        await client.set("tf:probe-loop", "through-sentinel")
        await client.aclose()

    asyncio.run(probe())
    assert shared_sentinels.client().get("tf:probe-loop") == b"through-sentinel"
