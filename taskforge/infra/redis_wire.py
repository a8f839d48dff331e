"""The event loop's own connections to Redis: an asyncio protocol, hiredis' parser, redis-py's handshake.

redis-py's asyncio connections spend as much CPU on their own machinery (a
stream reader, a timeout context per reply read, the pool's checkout and
return with their checks and events) as the exchange itself costs the
process. The event loop's hot paths talk to a single server over TCP or a Unix
socket through :class:`Wire` instead: each write goes out as it comes, replies
are parsed by hiredis as they arrive and matched in order to the exchanges
waiting for them, one timer for the oldest. :func:`connect` opens one with
the settings redis-py's own connection would use (address, credentials,
protocol, database, timeouts) and makes the handshake that connection makes.
Two users: ``taskforge.infra.redis_pipelines`` (the loop's pipelines) and
``taskforge.infra.redis_subscriber`` (the doorbells' subscription).

Over TLS, through Sentinel, or with a credential provider, :func:`plain_settings`
says no, and callers stay on redis-py's own connections (their handshakes are
redis-py's to get right).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import hiredis
from redis.asyncio.connection import AbstractConnection, Connection, ConnectionPool, UnixDomainSocketConnection
from redis.connection import HiredisRespSerializer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["Wire", "connect", "pack", "plain_settings", "raise_first_error"]

# redis-py's own packing through hiredis, as its blocking connections pack: a command name of two
# words ("CLIENT ID") goes as two arguments, an argument of the wrong type is a DataError.
_PACKER = HiredisRespSerializer()


def pack(commands: list[tuple[Any, ...]]) -> bytes:
    """``commands`` in Redis' protocol, ready for one write."""
    return b"".join([chunk for args in commands for chunk in _PACKER.pack(*args)])


def raise_first_error(replies: list[Any]) -> list[Any]:
    """``replies``, unless one is an error reply: then that error."""
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies


def plain_settings(pool: ConnectionPool) -> AbstractConnection | None:
    """redis-py's reading of ``pool``'s settings (never connected), when a :class:`Wire` can stand in for it."""
    settings = pool.connection_class(**pool.connection_kwargs)
    plain = type(settings) in (Connection, UnixDomainSocketConnection) and settings.credential_provider is None
    return settings if plain and type(pool) is ConnectionPool else None


@dataclass
class _Exchange:
    count: int
    done: asyncio.Future[list[Any]]
    replies: list[Any] = field(default_factory=list)


class Wire(asyncio.Protocol):
    """One connection to Redis: commands written as they come, their replies matched to them in order."""

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
        """Write ``packed`` (``count`` commands); their ``count`` replies, raw, errors included."""
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

    def close(self) -> None:
        """Close the connection; whatever still waits on it fails."""
        self._fail(RedisConnectionError("Connection closed by the client."))


async def connect[W: Wire](settings: AbstractConnection, protocol: Callable[[], W]) -> W:
    """A new connection made by ``protocol`` to where ``settings`` point, through redis-py's handshake."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(settings.socket_connect_timeout):
            if isinstance(settings, UnixDomainSocketConnection):
                _, wire = await loop.create_unix_connection(protocol, settings.path)
            else:
                assert isinstance(settings, Connection)
                _, wire = await loop.create_connection(protocol, settings.host, settings.port)
    except TimeoutError as exc:  # the builtin, an OSError: first
        raise RedisTimeoutError("Timeout connecting to Redis") from exc
    except OSError as exc:
        raise RedisConnectionError(f"Error connecting to Redis: {exc}") from exc
    try:
        async with asyncio.timeout(settings.socket_connect_timeout):
            await _introduce(wire, settings)
    except TimeoutError as exc:
        wire._fail(RedisTimeoutError("Timeout in the connection's handshake"))
        raise RedisTimeoutError("Timeout in the connection's handshake") from exc
    except BaseException:
        wire._fail(RedisConnectionError("Redis refused the connection's handshake"))
        raise
    return wire


async def _introduce(wire: Wire, settings: AbstractConnection) -> None:
    """The handshake redis-py's connection makes: the protocol and the credentials, then the database."""
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
        raise_first_error(await wire.exchange(pack(handshake), len(handshake)))
