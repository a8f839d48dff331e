"""The API's HTTP server: gunicorn's uvicorn worker, writing each answer in one piece.

uvicorn (httptools) writes an answer's status line and headers when the
app sends ``http.response.start``, and its body when the app sends
``http.response.body``: two ``send`` calls on the socket, and the client
wakes twice, once for headers it cannot use without the body. On the
single-task calls that second write was about a tenth of the API's CPU
(``make bench``, W3N's profile: ``RequestResponseCycle.send``).

Here the headers of an answer whose length is known (``content-length``:
every JSON answer) wait for its body and go with it in one write. An answer
of unknown length (``/events``' stream, chunked) has its headers written at
once, as before, so a stream's client sees them before the first event.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn_worker import UvicornWorker


class _Collected:
    """Stands in for the transport while uvicorn writes the headers: keeps them."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


class _Prefixed:
    """The transport, with ``prefix`` (the held headers) in front of the next write, or written before a close."""

    def __init__(self, transport: Any, prefix: bytes) -> None:
        self._transport = transport
        self.prefix = prefix

    def write(self, data: bytes) -> None:
        self._transport.write(self.prefix + data)
        self.prefix = b""

    def flush(self) -> None:
        if self.prefix:
            self.write(b"")

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteCycle(RequestResponseCycle):
    """uvicorn's request/response cycle; an answer of known length goes out in one write."""

    _held: bytes | None = None

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and not self.response_started and self._body_follows(message):
            transport, collected = self.transport, _Collected()
            self.transport = cast(asyncio.Transport, collected)
            try:
                await super().send(message)
                self._held = collected.data or None
            finally:
                self.transport = transport
            return
        held, self._held = self._held, None
        if held is None:
            await super().send(message)
            return
        transport, prefixed = self.transport, _Prefixed(self.transport, held)
        self.transport = cast(asyncio.Transport, prefixed)
        try:
            await super().send(message)
            if not self.disconnected:
                prefixed.flush()  # written with the body, or now when uvicorn wrote none
        finally:
            self.transport = transport

    def _body_follows(self, message: Any) -> bool:
        """Whether a body message will carry the held headers out: a length known, and not a HEAD (no body)."""
        if self.scope["method"] == "HEAD":
            return False
        return any(name.lower() == b"content-length" for name, _ in message.get("headers", ()))


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose requests run :class:`OneWriteCycle`."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        # The cycle was made, and its task scheduled but not started: it starts as a OneWriteCycle.
        if type(self.cycle) is RequestResponseCycle:  # not a cycle of before, nor none (an upgrade)
            self.cycle.__class__ = OneWriteCycle


class Worker(UvicornWorker):
    """gunicorn's uvicorn worker (uvloop) with :class:`OneWriteProtocol`."""

    CONFIG_KWARGS = {**UvicornWorker.CONFIG_KWARGS, "http": OneWriteProtocol}
