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
  timeouts), through one connection per client, an asyncio protocol
  (:class:`_Wire`): each pipeline is one write, its replies parsed by
  hiredis as they arrive and matched to their pipeline in order, one timer
  for the oldest exchange waiting. Concurrent pipelines share the connection
  and its round trips. A lane write and its bell (``ZADD``,
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
from collections import deque
from dataclasses import dataclass, field
from typing import Any, cast

import hiredis
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection, Connection, ConnectionPool, UnixDomainSocketConnection
from redis.connection import HiredisRespSerializer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["execute"]

# redis-py's own packing through hiredis, as its blocking connections pack: a command name of two
# words ("CLIENT ID") goes as two arguments, an argument of the wrong type is a DataError.
_PACKER = HiredisRespSerializer()


async def execute(pipe: Pipeline) -> list[Any]:
    """Send the commands queued on ``pipe`` in one write; their raw replies, in order."""
    commands = [args for args, _options in pipe.command_stack]
    if not commands:
        return []
    packed = _pack(commands)
    link = _link_of(pipe.connection_pool)
    if link is None:
        return await _through_the_pool(pipe.connection_pool, packed, len(commands))
    wire = link.wire if link.wire is not None and link.wire.open else await link.connect()
    return _raise_first_error(await wire.exchange(packed, len(commands)))


def _pack(commands: list[tuple[Any, ...]]) -> bytes:
    return b"".join([chunk for args in commands for chunk in _PACKER.pack(*args)])


def _raise_first_error(replies: list[Any]) -> list[Any]:
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies


# -- the loop's own connection ------------------------------------------------------


@dataclass
class _Exchange:
    count: int
    done: asyncio.Future[list[Any]]
    replies: list[Any] = field(default_factory=list)


class _Wire(asyncio.Protocol):
    """One connection to Redis: pipelines written as they come, their replies matched to them in order."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self.open = False
        self._transport: asyncio.Transport | None = None
        self._reader = hiredis.Reader(replyError=ResponseError)
        self._waiting: deque[_Exchange] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport's subclasses
        self.open = True

    async def exchange(self, packed: bytes, count: int) -> list[Any]:
        if not self.open or self._transport is None:
            raise RedisConnectionError("Connection closed by server.")
        exchange = _Exchange(count, asyncio.get_running_loop().create_future())
        self._waiting.append(exchange)
        self._transport.write(packed)
        if self._timer is None and self.timeout is not None:
            self._timer = asyncio.get_running_loop().call_later(self.timeout, self._timed_out)
        return await exchange.done

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while self._waiting:
            exchange = self._waiting[0]
            while len(exchange.replies) < exchange.count:
                reply = self._reader.gets()
                if reply is False:
                    return
                exchange.replies.append(reply)
            self._waiting.popleft()
            if not exchange.done.done():  # its caller may have been cancelled: the replies are read all the same
                exchange.done.set_result(exchange.replies)
            self._restart_timer()

    def _restart_timer(self) -> None:
        # One timer for the oldest exchange still waiting: a reply later than the timeout fails them all.
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._waiting and self.timeout is not None:
            self._timer = asyncio.get_running_loop().call_later(self.timeout, self._timed_out)

    def _timed_out(self) -> None:
        self._timer = None
        self._fail(RedisTimeoutError("Timeout reading from Redis"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError("Connection closed by server."))

    def _fail(self, error: Exception) -> None:
        # Replies still due can no longer be told apart: nothing more goes over this connection.
        self.open = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.abort()
        while self._waiting:
            exchange = self._waiting.popleft()
            if not exchange.done.done():
                exchange.done.set_exception(error)


@dataclass
class _Link:
    """Where a client's pool connects, and its current connection (one per pool, so one per event loop)."""

    settings: AbstractConnection  # never connected: redis-py's reading of the pool's settings
    wire: _Wire | None = None
    connecting: asyncio.Future[_Wire] | None = None

    async def connect(self) -> _Wire:
        if self.connecting is None:
            self.connecting = asyncio.ensure_future(self._connect())
            self.connecting.add_done_callback(self._connected)
        return await asyncio.shield(self.connecting)

    def _connected(self, attempt: asyncio.Future[_Wire]) -> None:
        self.connecting = None
        if not attempt.cancelled() and attempt.exception() is None:
            self.wire = attempt.result()

    async def _connect(self) -> _Wire:
        settings, loop = self.settings, asyncio.get_running_loop()
        try:
            async with asyncio.timeout(settings.socket_connect_timeout):
                if isinstance(settings, UnixDomainSocketConnection):
                    _, wire = await loop.create_unix_connection(lambda: _Wire(settings.socket_timeout), settings.path)
                else:
                    assert isinstance(settings, Connection)
                    _, wire = await loop.create_connection(
                        lambda: _Wire(settings.socket_timeout), settings.host, settings.port
                    )
        except TimeoutError as exc:  # the builtin, an OSError: first
            raise RedisTimeoutError("Timeout connecting to Redis") from exc
        except OSError as exc:
            raise RedisConnectionError(f"Error connecting to Redis: {exc}") from exc
        try:
            await self._introduce(wire)
        except BaseException:
            wire._fail(RedisConnectionError("Redis refused the connection's handshake"))
            raise
        return wire

    async def _introduce(self, wire: _Wire) -> None:
        """The handshake redis-py's connection makes: the protocol and the credentials, then the database."""
        settings = self.settings
        handshake: list[tuple[Any, ...]] = []
        if settings.protocol in (3, "3"):
            hello: tuple[Any, ...] = ("HELLO", 3)
            if settings.password:
                hello += ("AUTH", settings.username or "default", settings.password)
            handshake.append(hello)
        elif settings.password:
            handshake.append(("AUTH", *filter(None, (settings.username, settings.password))))
        if settings.db:
            handshake.append(("SELECT", settings.db))
        if handshake:
            _raise_first_error(await wire.exchange(_pack(handshake), len(handshake)))


_links: weakref.WeakKeyDictionary[ConnectionPool, _Link | None] = weakref.WeakKeyDictionary()


def _link_of(pool: ConnectionPool) -> _Link | None:
    """The pool's link; None for a pool whose connections this module leaves to redis-py (TLS, Sentinel)."""
    try:
        return _links[pool]
    except KeyError:
        pass
    settings = pool.connection_class(**pool.connection_kwargs)
    plain = type(settings) in (Connection, UnixDomainSocketConnection) and settings.credential_provider is None
    link = _Link(settings) if plain and type(pool) is ConnectionPool else None
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
    return _raise_first_error(replies)
