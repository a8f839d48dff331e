"""A pipeline sent from the event loop in one write over the loop's own connection, its replies read raw.

redis-py's asyncio ``Pipeline.execute`` spends on its own machinery (the
commands packed in Python, a response callback and a stack entry per
command, its bookkeeping around the connection) about as much again as the
exchange itself costs the process. Its connection path costs as much again:
the pool's checkout and return with their checks and events, and a timeout
context per reply read. The event loop's moves (an enqueue's announce, a
claim's lane pop, an ack's bells) still queue their commands on a redis-py
pipeline, with the same helpers as the threads (``lanes.add_ready``,
``doorbell.ring``: one definition of each command), and send them here:

* on a single server reached over TCP or a Unix socket (the client's pool
  says which, with its address, database, credentials, protocol and
  timeouts), through one connection per client
  (``taskforge.infra.redis_wire.Wire``): each pipeline is one write, its
  replies parsed by hiredis as they arrive and matched to their pipeline in
  order, one timer for the oldest exchange waiting. Concurrent pipelines
  share the connection and its round trips. A lane write and its bell (``ZADD``,
  ``ZREMRANGEBYRANK``, ``PUBLISH``) cost 134-153 µs of CPU this way against
  210-249 µs through the pool (3,000 in a row on uvloop, the local Redis,
  two alternations, on a slow machine); one single enqueue about 100 µs
  less in all (``python -m bench.phases``);
* over TLS or through Sentinel, through redis-py's pool and connections, as
  before (their handshakes are redis-py's to get right).

Failures are what redis-py's pipeline on this client gives (TaskForge's
event-loop client retries nothing): a connection refused or lost, or a reply
later than the client's socket timeout, fails every exchange waiting on the
connection with ``ConnectionError`` or ``TimeoutError`` and drops it; the
next call connects afresh. Replies come as the server sent them, without
redis-py's response callbacks (``ZPOPMIN``'s as ``[member, score]`` pairs
over RESP3, redis-py's default, or one flat list over RESP2). An error reply
is raised once every reply of its pipeline has been read, so the connection
stays in step.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from typing import Any

from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import ResponseError

from taskforge.infra.redis_wire import Wire, connect, pack, plain_settings, raise_first_error

__all__ = ["execute"]


async def execute(pipe: Pipeline) -> list[Any]:
    """Send the commands queued on ``pipe`` in one write; their raw replies, in order."""
    commands = [args for args, _options in pipe.command_stack]
    if not commands:
        return []
    packed = pack(commands)
    link = _link_of(pipe.connection_pool)
    if link is None:
        return await _through_the_pool(pipe.connection_pool, packed, len(commands))
    wire = link.wire if link.wire is not None and link.wire.open else await link.connect()
    return raise_first_error(await wire.exchange(packed, len(commands)))


# -- the loop's own connection ------------------------------------------------------


@dataclass
class _Link:
    """Where a client's pool connects, and its current connection (one per pool, so one per event loop)."""

    settings: AbstractConnection  # never connected: redis-py's reading of the pool's settings
    wire: Wire | None = None
    connecting: asyncio.Future[Wire] | None = None

    async def connect(self) -> Wire:
        if self.connecting is None:
            self.connecting = asyncio.ensure_future(self._connect())
            self.connecting.add_done_callback(self._connected)
        return await asyncio.shield(self.connecting)

    def _connected(self, attempt: asyncio.Future[Wire]) -> None:
        self.connecting = None
        if not attempt.cancelled() and attempt.exception() is None:
            self.wire = attempt.result()

    async def _connect(self) -> Wire:
        timeout = self.settings.socket_timeout
        return await connect(self.settings, lambda: Wire(timeout))


_links: weakref.WeakKeyDictionary[ConnectionPool, _Link | None] = weakref.WeakKeyDictionary()


def _link_of(pool: ConnectionPool) -> _Link | None:
    """The pool's link; None for a pool whose connections this module leaves to redis-py (TLS, Sentinel)."""
    try:
        return _links[pool]
    except KeyError:
        pass
    settings = plain_settings(pool)
    link = _Link(settings) if settings is not None else None
    _links[pool] = link
    return link


# -- through redis-py's pool --------------------------------------------------------


async def _through_the_pool(pool: ConnectionPool, packed: bytes, count: int) -> list[Any]:
    connection = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:

        async def exchange() -> list[Any]:
            return await _exchange(connection, packed, count)

        async def dropped(_error: Exception) -> None:
            await connection.disconnect()

        replies: list[Any] = await connection.retry.call_with_retry(exchange, dropped)
        return replies
    finally:
        await pool.release(connection)


async def _exchange(connection: AbstractConnection, packed: bytes, count: int) -> list[Any]:
    await connection.send_packed_command(packed)
    replies: list[Any] = []
    for _ in range(count):
        try:
            replies.append(await connection.read_response())
        except ResponseError as error:  # read in full: the next replies are still on the wire
            replies.append(error)
    return raise_first_error(replies)
