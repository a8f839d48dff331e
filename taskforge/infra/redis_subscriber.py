"""A subscription whose messages are handled as they arrive, by the event loop's own protocol.

Every API process listens to the doorbell channel (``queues.dispatch.doorbell``)
and so reads every pull queue's bell, whether or not anything in it waits:
with two API processes a single enqueue costs a bell in each. redis-py's
asyncio ``PubSub.get_message`` spends 120-180 µs of CPU per message (its
stream reader, a timeout context, a coroutine resumed per message, the
message's dict), where a protocol that parses the bytes as they arrive with
hiredis and hands each message to a callback spends 40-70 µs, most of it the
event loop's wake-up (3,000 bells published 1 ms apart to one listening
process on uvloop, alternating twice).

A :class:`Subscriber` is such a connection (``taskforge.infra.redis_wire``:
the same settings and handshake as redis-py's own connection would make) to
a single server over TCP or a Unix socket; :func:`subscribe` opens one, or
says None where redis-py must keep the subscription (TLS, Sentinel, a
credential provider; a Cluster's sharded pub/sub is never asked for). It
calls ``on_message(channel, data)`` for each message, on the event loop,
straight from the bytes received. Subscribing and unsubscribing more
channels later are single writes, as redis-py's are (their confirmations are
read and dropped). The connection keeps itself honest: after
:data:`IDLE_SECONDS` without a byte from the server it sends a ``PING``,
and when nothing at all comes back within :data:`ANSWER_SECONDS` it gives
the connection up, as it does on a lost connection or an error reply;
:attr:`Subscriber.lost` then holds why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import hiredis
from redis.asyncio.connection import ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from taskforge.infra.redis_wire import Wire, connect, pack, plain_settings

__all__ = ["ANSWER_SECONDS", "IDLE_SECONDS", "OnMessage", "Subscriber", "subscribe"]

#: Seconds without a byte from the server before the subscription asks with a PING (redis-py's
#: health check interval for the doorbells' subscription was the same).
IDLE_SECONDS = 15.0
#: Seconds a PING may go unanswered before the connection is given up as dead.
ANSWER_SECONDS = 5.0

OnMessage = Callable[[bytes, bytes], None]

_MESSAGE = b"message"
_PING = pack([("PING",)])


class Subscriber(Wire):
    """A connection in subscribed mode: each message goes to ``on_message`` as it is parsed."""

    def __init__(self, on_message: OnMessage, *, idle_seconds: float, answer_seconds: float) -> None:
        super().__init__(timeout=None)  # the handshake's exchanges are bounded by connect()
        self.on_message = on_message
        self.idle_seconds = idle_seconds
        self.answer_seconds = answer_seconds
        self.listening = False  # past the handshake: every reply is the subscription's
        loop = asyncio.get_running_loop()
        #: Fails (never succeeds) once the connection is given up: with why.
        self.lost: asyncio.Future[None] = loop.create_future()
        self._confirmed: dict[bytes, asyncio.Future[None]] = {}
        self._heard_at = loop.time()
        self._pinged_at: float | None = None
        self._watch: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Take the connection into subscribed mode (the handshake is done) and start watching it."""
        self.listening = True
        self._watch = asyncio.get_running_loop().call_later(self.idle_seconds, self._check)

    async def subscribe(self, *channels: str, confirmed: bool = False) -> None:
        """Subscribe ``channels``; with ``confirmed``, return once the server has confirmed the first."""
        waiting: asyncio.Future[None] | None = None
        if confirmed and channels:
            waiting = self._confirmed[channels[0].encode()] = asyncio.get_running_loop().create_future()
        self._write(("SUBSCRIBE", *channels))
        if waiting is not None:
            await waiting

    async def unsubscribe(self, *channels: str) -> None:
        self._write(("UNSUBSCRIBE", *channels))

    def _write(self, command: tuple[Any, ...]) -> None:
        if not self.open or self._transport is None:
            raise RedisConnectionError("Connection closed by server.")
        self._transport.write(pack([command]))

    def data_received(self, data: bytes) -> None:
        if not self.listening:
            super().data_received(data)  # the handshake's replies
            return
        self._heard_at = asyncio.get_running_loop().time()
        self._reader.feed(data)
        while True:
            try:
                reply = self._reader.gets()
            except hiredis.ProtocolError as exc:
                self._fail(RedisConnectionError(f"Protocol error: {exc}"))
                return
            if reply is False:
                return
            if isinstance(reply, list) and len(reply) == 3 and reply[0] == _MESSAGE:
                self.on_message(reply[1], reply[2])
            elif isinstance(reply, ResponseError):
                self._fail(reply)
                return
            elif isinstance(reply, list) and len(reply) == 3 and reply[0] == b"subscribe":
                waiting = self._confirmed.pop(reply[1], None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(None)
            # Anything else (an unsubscribe's confirmation, a PING's answer) only says the server is there.

    def _check(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._pinged_at is not None and self._heard_at < self._pinged_at:
            if now - self._pinged_at >= self.answer_seconds:
                self._watch = None
                self._fail(RedisTimeoutError("the subscription's PING went unanswered"))
                return
            delay = self._pinged_at + self.answer_seconds - now
        elif now - self._heard_at >= self.idle_seconds:
            self._pinged_at = now
            self._transport.write(_PING)  # type: ignore[union-attr]  # open: _fail cancels this timer
            delay = self.answer_seconds
        else:
            delay = self._heard_at + self.idle_seconds - now
        self._watch = loop.call_later(delay, self._check)

    def _fail(self, error: Exception) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for waiting in self._confirmed.values():
            if not waiting.done():
                waiting.set_exception(error)
        self._confirmed.clear()
        if not self.lost.done():
            self.lost.set_exception(error)
            self.lost.exception()  # retrieved here: whoever awaits it sees it; nobody else need
        super()._fail(error)


async def subscribe(
    pool: ConnectionPool,
    channels: list[str],
    on_message: OnMessage,
    *,
    idle_seconds: float = IDLE_SECONDS,
    answer_seconds: float = ANSWER_SECONDS,
) -> Subscriber | None:
    """A subscription to ``channels`` where ``pool`` connects, confirmed; None where redis-py must keep it."""
    settings = plain_settings(pool)
    if settings is None:
        return None
    subscriber = await connect(
        settings, lambda: Subscriber(on_message, idle_seconds=idle_seconds, answer_seconds=answer_seconds)
    )
    subscriber.start()
    try:
        async with asyncio.timeout(settings.socket_connect_timeout):
            await subscriber.subscribe(*channels, confirmed=True)
    except BaseException:
        subscriber.close()
        raise
    return subscriber
