"""Keep-alive HTTP/1.1 connections to one TaskForge API, over the standard library's ``http.client``.

The client's calls are small JSON requests to one origin, and a producer or
worker makes them one after another. httpx (its request and response
models, its connection pool, h11's parser) spends about 0.5-0.7 ms of CPU on
each such call; ``http.client`` over a reused socket about 0.25 ms
(docs/performance.md, "The Python client"). So a client whose base URL is
plain ``http://``, with no transport of its own and no proxy set in the
environment, sends through this pool; every other client (``https://``, a
proxy, a custom ``transport``) goes through httpx, which knows trust stores
and proxies the way users expect it to (``lean_pool_for``).

* Connections are reused, most recently returned first, by any thread: one
  connection is used by one call at a time. Each request is written in one
  piece; answers are parsed by ``http.client``.
* An idle connection the server has closed meanwhile (its keep-alive timeout)
  is readable: it is dropped before use, as httpcore drops its own, instead
  of failing the call that picks it.
* ``timeout`` bounds connecting and each read and write on the socket, the
  meaning of httpx's single-number timeout.
* A failed call closes its connection; the error (an ``OSError`` or an
  ``http.client.HTTPException``) is the caller's to map.

``open_sender`` picks the way for a client: a :class:`PooledSender` over
this pool or an :class:`HttpxSender`; both send the same requests and turn
"no answer" into ``ConnectionFailed``, so the client holds no transport code.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import urllib.request
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

import httpx

from taskforge_client.errors import ConnectionFailed

__all__ = [
    "TRANSPORT_ERRORS",
    "Answer",
    "ConnectionPool",
    "HttpxSender",
    "PooledSender",
    "lean_pool_for",
    "open_sender",
]

# What a call through the pool raises when no complete answer came back.
TRANSPORT_ERRORS = (OSError, http.client.HTTPException)
MAX_IDLE_CONNECTIONS = 20  # httpx's default keep-alive limit
# Parsed URLs an HttpxSender keeps; paths with a task id in them come and go.
MAX_CACHED_URLS = 256
JSON_CONTENT = {"Content-Type": "application/json"}
BODILESS_METHODS_THAT_SEND_A_LENGTH = frozenset({"POST", "PUT", "PATCH"})


class Answer:
    """An HTTP answer with the parts of httpx's ``Response`` the client reads."""

    __slots__ = ("content", "headers", "reason_phrase", "status_code")

    def __init__(self, status_code: int, reason_phrase: str, headers: http.client.HTTPMessage, content: bytes):
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.headers = headers  # case-insensitive ``get``, as httpx's headers
        self.content = content

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class ConnectionPool:
    """Keep-alive connections to one ``http://`` origin; thread-safe.

    A request leaves in one ``sendall`` (``http.client``'s own connection
    sends the headers and the body in two, which costs the server a second
    wake-up and read for every call); its answer is read by
    ``http.client.HTTPResponse``, the standard library's parser.
    """

    def __init__(self, host: str, port: int, headers: Mapping[str, str], *, max_idle: int = MAX_IDLE_CONNECTIONS):
        self.host = host
        self.port = port
        authority = f"[{host}]" if ":" in host else host
        if port != 80:
            authority += f":{port}"
        lines = [f"Host: {authority}", *(f"{name}: {value}" for name, value in headers.items())]
        if any("\r" in line or "\n" in line for line in lines):
            raise ValueError("header values may not contain line breaks")
        self._head = "".join(f"{line}\r\n" for line in lines).encode("latin-1")
        self._max_idle = max_idle
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False

    def request(self, method: str, target: str, body: bytes | None, timeout: float) -> Answer:
        """Send one request (``body`` is JSON) and read its whole answer."""
        message = [f"{method} {target} HTTP/1.1\r\n".encode("ascii"), self._head]
        if body is not None:
            message.append(b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
            message.append(body)
        elif method in BODILESS_METHODS_THAT_SEND_A_LENGTH:
            message.append(b"Content-Length: 0\r\n\r\n")
        else:
            message.append(b"\r\n")
        sock = self._checkout(timeout)
        try:
            sock.sendall(b"".join(message))
            response = http.client.HTTPResponse(sock, method=method)
            response.begin()
            content = response.read()
        except BaseException:
            sock.close()
            raise
        if response.will_close:  # the server said Connection: close, or answered HTTP/1.0
            sock.close()
        else:
            self._checkin(sock)
        return Answer(response.status, response.reason, response.msg, content)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()

    def _checkout(self, timeout: float) -> socket.socket:
        while True:
            with self._lock:
                sock = self._idle.pop() if self._idle else None
            if sock is None:
                sock = socket.create_connection((self.host, self.port), timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a request is one small write
                return sock
            if _closed_by_peer(sock):
                sock.close()
                continue
            sock.settimeout(timeout)
            return sock

    def _checkin(self, sock: socket.socket) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(sock)
                return
        sock.close()


def _closed_by_peer(sock: socket.socket) -> bool:
    """An idle keep-alive socket with something to read has been closed (or broken) by the server."""
    if not hasattr(select, "poll"):  # Windows; select() is fine there for one socket
        return bool(select.select([sock], [], [], 0)[0])
    poller = select.poll()  # select() refuses descriptors past 1023; poll() does not
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def lean_pool_for(base_url: str, headers: Mapping[str, str]) -> ConnectionPool | None:
    """A pool for ``base_url`` when it is plain HTTP with no proxy from the environment, else None (use httpx)."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        return None
    proxies = urllib.request.getproxies_environment()
    proxied = proxies.get("http") or proxies.get("all")
    if proxied and not urllib.request.proxy_bypass(parts.hostname):
        return None
    return ConnectionPool(parts.hostname, parts.port or 80, headers)


# -- what the client sends through ------------------------------------------------------


class Sender(Protocol):
    """Sends one request to the API; no answer at all is ``ConnectionFailed``."""

    def send(self, method: str, path: str, content: bytes | None, timeout: float | None) -> Answer | httpx.Response:
        """``path`` is the API's (``/queues/...``); ``timeout`` None: the client's own."""
        ...

    def close(self) -> None: ...


class PooledSender:
    """Through a :class:`ConnectionPool` (a plain ``http://`` API)."""

    def __init__(self, base_url: str, pool: ConnectionPool, timeout: float) -> None:
        self.base_url = base_url
        self.pool = pool
        self.timeout = timeout
        # An API served under a path (/taskforge) keeps it, percent-encoded as a request line needs.
        self._prefix = quote(urlsplit(base_url).path, safe="/%!$&'()*+,;=:@-._~")

    def send(self, method: str, path: str, content: bytes | None, timeout: float | None) -> Answer:
        try:
            return self.pool.request(method, self._prefix + path, content, timeout or self.timeout)
        except TRANSPORT_ERRORS as exc:
            raise ConnectionFailed(f"{method} {self.base_url}{path}: {exc!r}") from exc

    def close(self) -> None:
        self.pool.close()


class HttpxSender:
    """Through an ``httpx.Client``: ``https://``, a proxy from the environment, a caller's ``transport``."""

    def __init__(
        self, base_url: str, headers: Mapping[str, str], timeout: float, transport: httpx.BaseTransport | None
    ) -> None:
        self.base_url = base_url
        self.http = httpx.Client(
            base_url=base_url, timeout=httpx.Timeout(timeout), headers=headers, transport=transport
        )
        self._urls: dict[str, httpx.URL] = {}

    def send(self, method: str, path: str, content: bytes | None, timeout: float | None) -> httpx.Response:
        try:
            return self.http.request(
                method,
                self._url(path),
                content=content,
                headers=None if content is None else JSON_CONTENT,
                timeout=httpx.Timeout(timeout) if timeout else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"{method} {self.base_url}{path}: {exc!r}") from exc

    def close(self) -> None:
        self.http.close()

    def _url(self, path: str) -> httpx.URL:
        """The absolute URL of ``path``, parsed once per path: httpx parses a string path twice per call."""
        url = self._urls.get(path)
        if url is None:
            if len(self._urls) >= MAX_CACHED_URLS:
                self._urls.clear()  # per-task paths filled it: the repeated ones come back at once
            url = self._urls[path] = httpx.URL(self.base_url + path)
        return url


def open_sender(
    base_url: str, headers: Mapping[str, str], timeout: float, transport: httpx.BaseTransport | None = None
) -> PooledSender | HttpxSender:
    """The pool for a plain ``http://`` API (:func:`lean_pool_for`), httpx for anything else or a given transport."""
    pool = None if transport is not None else lean_pool_for(base_url, headers)
    if pool is None:
        return HttpxSender(base_url, headers, timeout, transport)
    return PooledSender(base_url, pool, timeout)
