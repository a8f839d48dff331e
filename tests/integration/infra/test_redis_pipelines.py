"""Pipelines sent from the event loop in one write (taskforge.infra.redis_pipelines), on the real Redis."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from taskforge.infra import redis_pipelines
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
