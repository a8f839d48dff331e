"""The pusher's HTTP/1.1 client: keep-alive connections on its event loop, answers parsed by httptools.

A delivery needs little of HTTP: one ``POST`` with a body of known length, and of the answer its
status, its headers and at most 64 KiB of its body. httpcore did that at about 2.5 ms of CPU per
request (its pool, its locks, anyio's streams; W9 in docs/performance.md); an asyncio protocol
with httptools' C parser does it at a small fraction of that, on the same event loop.

* One request at a time per connection (no pipelining). A connection goes back to its origin's
  idle list only when its answer was read whole and both sides keep it alive; it is closed after
  anything else (an answer cut at the limit, ``Connection: close``, an error, a timeout or a
  cancelled delivery), so a connection is never reused mid-answer.
* At most ``max_connections`` are open at once: a request waits for a free one, and opening a new
  connection closes the longest idle one first when the bound is reached. Idle connections are
  closed after ``KEEPALIVE_SECONDS``.
* Connections go only to addresses ``queues.push.targets`` lets through; TLS verifies the
  certificate against the URL's host (SNI); redirects are answers like any other (never followed).
* Deadlines are the caller's (``asyncio.timeout`` around ``request``).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httptools

from queues.push.targets import connect_address

#: How long an idle keep-alive connection is kept open.
KEEPALIVE_SECONDS = 30.0
DEFAULT_PORTS = {"http": 80, "https": 443}


class ConnectionFailed(Exception):
    """No answer: the connection could not be made, broke, or the answer was not HTTP; says why."""


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int


@dataclass(frozen=True)
class Target:
    """A URL taken apart once: where to connect and what the request line and ``Host`` say."""

    origin: Origin
    target: bytes  # path and query, as sent on the request line
    host_header: bytes

    @classmethod
    def of(cls, url: str) -> Target:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise ConnectionFailed(f"unsupported URL scheme {parts.scheme!r}")
        if not parts.hostname:
            raise ConnectionFailed("the URL has no host")
        try:
            port = parts.port or DEFAULT_PORTS[scheme]
        except ValueError as exc:
            raise ConnectionFailed(f"bad port in the URL: {exc}") from None
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        host_header = shown if port == DEFAULT_PORTS[scheme] else f"{shown}:{port}"
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(Origin(scheme, host, port), target.encode("ascii"), host_header.encode("ascii"))


@dataclass
class Response:
    status: int
    #: names lower-cased (the last of repeated ones)
    headers: dict[str, str]
    body: bytes
    #: whether the body was longer than what was kept
    truncated: bool


@dataclass
class _Reading:
    """The answer being read on a connection."""

    done: asyncio.Future[Response]
    limit: int
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    headers_complete: bool = False


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; httptools calls the ``on_*`` methods as the answer arrives."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.reading: _Reading | None = None
        self.reusable = True
        self.closed = False
        self.idle_since = 0.0

    # --- asyncio ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.reading is None:
            self.close()  # bytes nobody asked for: this connection's framing cannot be trusted
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ConnectionFailed("the receiver switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(ConnectionFailed(f"not an HTTP/1.1 answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        reading = self.reading
        if reading is None or reading.done.done():
            return
        if reading.headers_complete and not self.parser.should_keep_alive():
            # An answer without Content-Length or chunking ends where the connection does.
            self._finish(truncated=False)
        else:
            detail = f": {exc}" if exc else ""
            self._fail(ConnectionFailed(f"the connection closed before the answer was complete{detail}"))

    # --- httptools -------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.reading is not None:
            self.reading.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        if self.reading is not None:
            self.reading.status = self.parser.get_status_code()
            self.reading.headers_complete = True

    def on_body(self, body: bytes) -> None:
        reading = self.reading
        if reading is None or reading.done.done():
            return
        reading.chunks.append(body)
        reading.size += len(body)
        if reading.size > reading.limit:
            self.reusable = False  # the rest of this answer is never read
            self._finish(truncated=True)

    def on_message_complete(self) -> None:
        reading = self.reading
        if reading is None or reading.done.done():
            return
        if 100 <= reading.status < 200:
            # An interim answer (100 Continue, 103 Early Hints): the real one follows.
            self.reading = _Reading(reading.done, reading.limit)
            return
        if not self.parser.should_keep_alive():
            self.reusable = False
        self._finish(truncated=False)

    # --- one request -----------------------------------------------------------------------

    async def request(self, head: bytes, body: bytes, limit: int) -> Response:
        """Send one request (head and body) and read its answer, keeping at most ``limit`` body bytes."""
        assert self.transport is not None and self.reading is None
        done: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self.reading = _Reading(done, limit)
        self.transport.write(head + body)
        try:
            return await done
        finally:
            self.reading = None
            if not done.done():  # cancelled (a timeout): what the receiver sends next is not ours
                self.reusable = False

    def _finish(self, *, truncated: bool) -> None:
        reading = self.reading
        assert reading is not None
        body = b"".join(reading.chunks)[: reading.limit]
        reading.done.set_result(Response(reading.status, reading.headers, body, truncated))

    def _fail(self, exc: Exception) -> None:
        self.reusable = False
        if self.reading is not None and not self.reading.done.done():
            self.reading.done.set_exception(exc)
        self.close()

    @property
    def usable(self) -> bool:
        return self.reusable and not self.closed and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()


class ConnectionPool:
    """Keep-alive connections by origin, at most ``max_connections`` open at once."""

    def __init__(self, *, max_connections: int, allow_private: bool, ssl_context: ssl.SSLContext) -> None:
        self.allow_private = allow_private
        self.ssl_context = ssl_context
        self.max_connections = max_connections
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: dict[Origin, deque[Connection]] = {}
        self._open: set[Connection] = set()

    async def post(self, url: Target, headers: list[tuple[bytes, bytes]], body: bytes, limit: int) -> Response:
        head = b"".join(
            [
                b"POST ",
                url.target,
                b" HTTP/1.1\r\nHost: ",
                url.host_header,
                b"\r\nContent-Length: ",
                str(len(body)).encode("ascii"),
                b"\r\n",
                *(name + b": " + value + b"\r\n" for name, value in headers),
                b"\r\n",
            ]
        )
        async with self._slots:
            connection = self._idle_connection(url.origin) or await self._connect(url.origin)
            try:
                response = await connection.request(head, body, limit)
            except BaseException:
                connection.close()
                self._open.discard(connection)
                raise
            if connection.usable:
                connection.idle_since = time.monotonic()
                self._idle.setdefault(url.origin, deque()).append(connection)
            else:
                connection.close()
                self._open.discard(connection)
            return response

    def _idle_connection(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the most recently used: the least likely to have been closed
            if connection.usable and now - connection.idle_since < KEEPALIVE_SECONDS:
                return connection
            connection.close()
            self._open.discard(connection)
        return None

    async def _connect(self, origin: Origin) -> Connection:
        if len(self._open) >= self.max_connections:
            self._close_longest_idle()
        address = await connect_address(origin.host, origin.port, allow_private=self.allow_private)
        loop = asyncio.get_running_loop()
        tls = origin.scheme == "https"
        try:
            _, connection = await loop.create_connection(
                lambda: Connection(origin),
                address,
                origin.port,
                ssl=self.ssl_context if tls else None,
                server_hostname=origin.host if tls else None,
            )
        except ssl.SSLError as exc:
            raise ConnectionFailed(f"TLS: {exc.reason or exc}") from None
        except OSError as exc:
            raise ConnectionFailed(f"cannot connect to {origin.host}:{origin.port}: {exc.strerror or exc}") from None
        self._open.add(connection)
        return connection

    def _close_longest_idle(self) -> None:
        oldest: Connection | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest.idle_since):
                oldest = idle[0]
        if oldest is not None:
            self._idle[oldest.origin].popleft()
            oldest.close()
            self._open.discard(oldest)

    def close(self) -> None:
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()
