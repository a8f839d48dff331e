"""Pull queues' bells reach the API processes' hubs only, push queues' bells the pusher's only (real Redis);
a bell of a queue known by its name only reaches both.

Every listening process reads every bell of its channel, so a bell on the
wrong one costs a process CPU for nothing (or, missed, costs a wait its
latency). Each hub is rung a bell it must not hear before the last one it
must hear: Redis delivers a subscriber's messages in the order they were
published, so once that one has arrived the other would have too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import pytest

from queues.dispatch import announce, doorbell
from tests.factories import QueueFactory

pytestmark = pytest.mark.django_db(transaction=True)

PUSH_SETTINGS = {"url": "https://hooks.example.com/run", "timeout_seconds": 30, "max_concurrent": 10, "headers": {}}


def _since(hub: doorbell.Hub, before: int | None) -> int:
    now = hub.mark()
    assert before is not None and now is not None, "the hub stopped listening"
    return now - before


async def _heard_at_least(hub: doorbell.Hub, before: int | None, bells: int) -> None:
    deadline = time.monotonic() + 5
    while _since(hub, before) < bells:
        assert time.monotonic() < deadline, "the hub never heard the bells it listens for"
        await asyncio.sleep(0.005)


async def _warm(hub: doorbell.Hub) -> doorbell.Hub:
    """``hub`` subscribed, and done with the wake-up it gives every waiter when it connects."""
    async with hub.waiter("warm_up", 1):
        pass
    assert hub.connected
    return hub


async def _ring_and_listen(ring: Callable[[str, bool], Awaitable[None]]) -> None:
    """Ring orders (pull), hooks (push), orders again; each hub must hear its own queue's bells only."""
    pull_hub, push_hub = await _warm(doorbell.hub()), await _warm(doorbell.hub(push=True))
    async with contextlib.AsyncExitStack() as stack:
        pull_orders = await stack.enter_async_context(pull_hub.waiter("orders", 1))
        pull_hooks = await stack.enter_async_context(pull_hub.waiter("hooks", 1))
        push_orders = await stack.enter_async_context(push_hub.waiter("orders", 1))
        push_hooks = await stack.enter_async_context(push_hub.waiter("hooks", 1))
        pull_before, push_before = pull_hub.mark(), push_hub.mark()
        await ring("orders", False)
        await ring("hooks", True)
        await ring("orders", False)
        await _heard_at_least(push_hub, push_before, 1)  # hooks: a first orders heard here would have come first
        await _heard_at_least(pull_hub, pull_before, 2)  # both orders: a hooks heard here would have come between
        assert push_hooks.event.is_set() and not push_orders.event.is_set()
        assert pull_orders.event.is_set() and not pull_hooks.event.is_set()
    await push_hub.aclose()
    await pull_hub.aclose()


def test_each_hub_hears_only_its_own_kind_of_queue():
    async def ring(name: str, push: bool) -> None:
        doorbell.ring(name, 1, push=push)

    asyncio.run(_ring_and_listen(ring))


def test_announcing_a_queue_rings_the_hub_that_takes_its_tasks():
    queues = {"orders": QueueFactory(name="orders"), "hooks": QueueFactory(name="hooks", push=PUSH_SETTINGS)}

    async def ring(name: str, push: bool) -> None:
        announce.announce(queues[name], [])  # as a resumed queue is announced

    asyncio.run(_ring_and_listen(ring))


def test_a_bell_of_a_queue_known_by_name_only_reaches_both_hubs():
    async def scenario() -> None:
        hubs = [await _warm(doorbell.hub()), await _warm(doorbell.hub(push=True))]
        async with contextlib.AsyncExitStack() as stack:
            waiters = [await stack.enter_async_context(hub.waiter("due_soon", 1)) for hub in hubs]
            doorbell.ring("due_soon", 1, push=None)  # the scheduler's fast tier knows queues by name only
            deadline = time.monotonic() + 5
            while not all(waiter.event.is_set() for waiter in waiters):
                assert time.monotonic() < deadline, "a hub never heard the bell"
                await asyncio.sleep(0.005)
        for hub in hubs:
            await hub.aclose()

    asyncio.run(scenario())
