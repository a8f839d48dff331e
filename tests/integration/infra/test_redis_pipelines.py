"""Pipelines sent from the event loop in one write (taskforge.infra.redis_pipelines), on the real Redis."""

from __future__ import annotations

import asyncio
import shutil
import signal
import time

import pytest
import redis
import uvloop
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from taskforge.infra import redis_pipelines
from taskforge.infra.postgres import aio
from taskforge.infra.redis import async_redis_client, redis_client
from tests.integration.queues.loop import run


def _client():  # type: ignore[no-untyped-def]
    client = async_redis_client()
    assert client is not None  # not a Cluster
    return client


def test_the_replies_come_raw_and_in_order_and_the_commands_ran():
    async def scenario() -> list[object]:
        pipe = _client().pipeline(transaction=False)
        pipe.zadd("pipelines:lane", {"a": 2, "b": 1, "c": 3})
        pipe.zpopmin("pipelines:lane", 2)
        pipe.publish("pipelines:bell", b"1 q")
        return await redis_pipelines.execute(pipe)

    added, popped, heard = run(scenario)
    assert added == 3
    assert popped == [[b"b", 1.0], [b"a", 2.0]]  # as RESP3 sends them: no response callback
    assert heard == 0  # nobody subscribed
    assert redis_client().zrange("pipelines:lane", 0, -1) == [b"c"]


def test_an_error_reply_is_raised_after_every_reply_is_read_and_the_connection_stays_in_step():
    redis_client().set("pipelines:text", "not a sorted set")

    async def scenario() -> tuple[ResponseError, list[object]]:
        failing = _client().pipeline(transaction=False)
        failing.zadd("pipelines:text", {"a": 1})  # WRONGTYPE
        failing.zadd("pipelines:after", {"b": 1})
        with pytest.raises(ResponseError) as raised:
            await redis_pipelines.execute(failing)
        following = _client().pipeline(transaction=False)
        following.zcard("pipelines:after")
        following.get("pipelines:text")
        return raised.value, await redis_pipelines.execute(following)

    error, replies = run(scenario)
    assert "WRONGTYPE" in str(error)
    assert replies == [1, b"not a sorted set"]  # the command after the error ran; the next replies are their own


def test_a_connection_killed_by_the_server_fails_one_pipeline_and_the_next_runs_on_a_fresh_one():
    """As redis-py's own pipeline on this client (no retries configured): the caller sees a ConnectionError."""

    async def scenario() -> tuple[int, int, list[object]]:
        first = _client().pipeline(transaction=False)
        first.client_id()
        (killed,) = await redis_pipelines.execute(first)
        assert redis_client().client_kill_filter(_id=killed) == 1
        cut = _client().pipeline(transaction=False)
        cut.incr("pipelines:counter")
        with pytest.raises(RedisConnectionError):
            await redis_pipelines.execute(cut)
        again = _client().pipeline(transaction=False)
        again.client_id()
        again.incr("pipelines:counter")
        replies = await redis_pipelines.execute(again)
        return killed, replies[0], replies[1:]

    killed, replacement, rest = run(scenario)
    assert replacement != killed
    assert rest == [1]  # the cut pipeline never reached the server
    assert redis_client().get("pipelines:counter") == b"1"


def test_on_uvloop_as_in_the_api_the_replies_come_raw_and_a_killed_connection_is_replaced():
    """The API's loop is uvloop's, whose transports are its own classes: the same exchange there."""

    async def scenario() -> tuple[list[object], int, int]:
        first = _client().pipeline(transaction=False)
        first.zadd("pipelines:uv", {"a": 2, "b": 1})
        first.zpopmin("pipelines:uv", 1)
        first.client_id()
        added, popped, killed = await redis_pipelines.execute(first)
        assert redis_client().client_kill_filter(_id=killed) == 1
        cut = _client().pipeline(transaction=False)
        cut.ping()
        with pytest.raises(RedisConnectionError):
            await redis_pipelines.execute(cut)
        again = _client().pipeline(transaction=False)
        again.client_id()
        (replacement,) = await redis_pipelines.execute(again)
        return [added, popped], killed, replacement

    async def on_uvloop() -> tuple[list[object], int, int]:
        try:
            return await scenario()
        finally:
            await aio.close()

    replies, killed, replacement = uvloop.run(on_uvloop())
    assert replies == [2, [[b"b", 1.0]]]
    assert replacement != killed


def test_concurrent_pipelines_share_one_connection_and_each_gets_its_own_replies():
    async def one(n: int) -> list[object]:
        pipe = _client().pipeline(transaction=False)
        pipe.incrby(f"pipelines:n{n}", n)
        pipe.client_id()
        pipe.get(f"pipelines:n{n}")
        return await redis_pipelines.execute(pipe)

    async def scenario() -> list[list[object]]:
        return list(await asyncio.gather(*(one(n) for n in range(1, 201))))

    answers = run(scenario)
    assert [(added, got) for added, _, got in answers] == [(n, str(n).encode()) for n in range(1, 201)]
    assert len({connection for _, connection, _ in answers}) == 1  # pipelined on one connection, in order


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs a redis-server binary")
def test_the_connection_authenticates_selects_its_database_and_times_out_on_a_server_that_stopped(own_redis):
    port = int(own_redis.args[2])

    async def scenario() -> tuple[list[object], type[Exception], list[object]]:
        first = _client().pipeline(transaction=False)
        first.set("pipelines:where", "db 3")
        first.zadd("pipelines:lane", {"a": 1})
        first.zpopmin("pipelines:lane", 1)
        replies = await redis_pipelines.execute(first)
        own_redis.send_signal(signal.SIGSTOP)  # a hung server: the connection stays up, nothing answers
        stalled = _client().pipeline(transaction=False)
        stalled.ping()
        began = time.monotonic()
        with pytest.raises(RedisTimeoutError) as raised:
            await redis_pipelines.execute(stalled)
        assert time.monotonic() - began >= 1.9  # the client's socket timeout, 2 s
        own_redis.send_signal(signal.SIGCONT)
        again = _client().pipeline(transaction=False)
        again.get("pipelines:where")
        return replies, raised.type, await redis_pipelines.execute(again)

    replies, timed_out, after = run(scenario)
    assert replies == [b"OK", 1, [[b"a", 1.0]]]
    assert timed_out is RedisTimeoutError
    assert after == [b"db 3"]  # a fresh connection, authenticated and on database 3 again
    assert redis.Redis(port=port, password="sesame", db=3).get("pipelines:where") == b"db 3"


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs a redis-server binary")
def test_a_wrong_password_is_an_error_not_a_connection_in_use(own_redis, settings):
    settings.REDIS_URL = settings.REDIS_URL.replace("sesame", "wrong")

    async def scenario() -> None:
        pipe = _client().pipeline(transaction=False)
        pipe.ping()
        await redis_pipelines.execute(pipe)

    with pytest.raises(redis.RedisError, match=r"WRONGPASS|invalid"):
        run(scenario)
