"""A subscription read by the event loop's own protocol (taskforge.infra.redis_subscriber), on the real Redis;
and the doorbells' hub, which listens through it, losing it and coming back."""

from __future__ import annotations

import asyncio
import shutil
import signal
import time
from collections.abc import Awaitable, Callable

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from queues.dispatch import doorbell
from taskforge.infra import redis_subscriber
from taskforge.infra.redis import async_pubsub_client, redis_client
from tests.integration.queues.loop import run

Heard = list[tuple[bytes, bytes]]


async def _open(channels: list[str], heard: Heard, **timing: float) -> redis_subscriber.Subscriber:
    client = await async_pubsub_client(channels[0])
    try:
        subscriber = await redis_subscriber.subscribe(
            client.connection_pool, channels, lambda channel, data: heard.append((channel, data)), **timing
        )
    finally:
        await client.aclose()
    assert subscriber is not None  # a single server over TCP: the loop's own protocol
    return subscriber


async def _until(condition: Callable[[], bool], what: str, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.005)


async def _subscribers_of(channel: str, count: int) -> None:
    await _until(lambda: redis_client().pubsub_numsub(channel) == [(channel.encode(), count)], f"{channel}: {count}")


def test_messages_reach_the_callback_in_order_and_channels_come_and_go():
    async def scenario() -> Heard:
        heard: Heard = []
        subscriber = await _open(["subscriber:a"], heard)
        try:
            publish = redis_client().publish
            assert [publish("subscriber:a", n) for n in (b"1", b"2", b"3")] == [1, 1, 1]  # confirmed: already there
            await subscriber.subscribe("subscriber:b")
            await _subscribers_of("subscriber:b", 1)
            publish("subscriber:b", b"4")
            await subscriber.unsubscribe("subscriber:a")
            await _subscribers_of("subscriber:a", 0)
            assert publish("subscriber:a", b"unheard") == 0
            publish("subscriber:b", b"5")
            await _until(lambda: len(heard) == 5, "five messages")
            await asyncio.sleep(0.05)  # nothing more comes
            return heard
        finally:
            subscriber.close()

    assert run(scenario) == [
        (b"subscriber:a", b"1"),
        (b"subscriber:a", b"2"),
        (b"subscriber:a", b"3"),
        (b"subscriber:b", b"4"),
        (b"subscriber:b", b"5"),
    ]


def _kill(subscriber: redis_subscriber.Subscriber) -> None:
    """Close the subscriber's connection from the server's side."""
    host, port = subscriber._transport.get_extra_info("sockname")[:2]  # type: ignore[union-attr]
    assert redis_client().client_kill(f"{host}:{port}")


def test_a_connection_killed_by_the_server_is_reported_lost():
    async def scenario() -> None:
        subscriber = await _open(["subscriber:killed"], [])
        _kill(subscriber)
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(subscriber.lost, 5)
        assert not subscriber.open
        with pytest.raises(RedisConnectionError):  # nothing more goes over it
            await subscriber.subscribe("subscriber:after")

    run(scenario)


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs a redis-server binary")
def test_it_authenticates_asks_when_quiet_and_gives_up_a_server_that_stopped_answering(own_redis):
    port = int(own_redis.args[2])
    owner = redis.Redis(port=port, password="sesame")

    async def scenario() -> tuple[Heard, float, float]:
        heard: Heard = []
        subscriber = await _open(["subscriber:quiet"], heard, idle_seconds=0.2, answer_seconds=0.5)
        try:
            await asyncio.sleep(0.7)  # quiet: pinged and answered, more than once
            assert not subscriber.lost.done()
            owner.publish("subscriber:quiet", b"still here")
            await _until(lambda: len(heard) == 1, "the message after the quiet spell")
            own_redis.send_signal(signal.SIGSTOP)  # a hung server: the connection stays up, nothing answers
            stopped = time.monotonic()
            with pytest.raises(RedisTimeoutError):
                await asyncio.wait_for(subscriber.lost, 5)
            return heard, stopped, time.monotonic()
        finally:
            subscriber.close()
            own_redis.send_signal(signal.SIGCONT)

    heard, stopped, given_up = run(scenario)
    assert heard == [(b"subscriber:quiet", b"still here")]
    # Quiet for 0.2 s, then 0.5 s for an answer: given up after both, and not long after.
    assert 0.5 <= given_up - stopped <= 2.5


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs a redis-server binary")
def test_a_wrong_password_fails_the_subscription(own_redis, settings):
    settings.REDIS_URL = settings.REDIS_URL.replace("sesame", "wrong")
    with pytest.raises(redis.RedisError, match=r"WRONGPASS|invalid"):
        run(lambda: _open(["subscriber:refused"], []))


def _hub_scenario(body: Callable[[doorbell.Hub], Awaitable[None]]) -> None:
    async def scenario() -> None:
        hub = doorbell.hub()
        try:
            await body(hub)
        finally:
            await hub.aclose()

    run(scenario)


def test_the_hub_listens_through_it_and_comes_back_after_losing_it():
    async def body(hub: doorbell.Hub) -> None:
        async with hub.waiter("subscriber_orders", 1) as waiter:
            own = hub._pubsub
            assert isinstance(own, redis_subscriber.Subscriber)  # a single server: the loop's own protocol
            waiter.event.clear()  # the wake-up every waiter gets when the hub connects
            doorbell.ring("subscriber_orders", 1, push=False)
            await asyncio.wait_for(waiter.event.wait(), 5)

            waiter.event.clear()
            _kill(own)
            await asyncio.wait_for(waiter.event.wait(), 5)  # lost: every waiter is woken to look in Postgres
            await _until(lambda: hub.connected and hub._pubsub is not own, "the hub back on a new subscription")
            assert isinstance(hub._pubsub, redis_subscriber.Subscriber)

            waiter.event.clear()
            await asyncio.sleep(0.05)  # the wake-up of the reconnection is behind us
            waiter.event.clear()
            doorbell.ring("subscriber_orders", 1, push=False)
            await asyncio.wait_for(waiter.event.wait(), 5)

    _hub_scenario(body)
