"""A lean HTTP/1.1 keep-alive client for load generation.

The load generator shares two cores with the server it measures, so every
microsecond it spends is taken from TaskForge: a general-purpose client
(httpx) costs several times more CPU per request than this, which writes the
request bytes itself and reads exactly one response per call.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import orjson


class HttpError(Exception):
    pass


class Connection:
    """One keep-alive connection; one request at a time."""

    def __init__(self, base_url: str, key: str) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self._head = (
            f"Host: {self.host}:{self.port}\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nConnection: keep-alive\r\n"
        ).encode()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        raw = b"" if body is None else orjson.dumps(body)
        message = b"".join(
            (f"{method} {path} HTTP/1.1\r\n".encode(), self._head, b"Content-Length: %d\r\n\r\n" % len(raw), raw)
        )
        for attempt in (1, 2):
            if self._writer is None:
                await self._open()
            try:
                assert self._writer is not None
                self._writer.write(message)
                return await self._read_response()
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                # A server may close an idle keep-alive connection: reconnect once.
                self.close()
                if attempt == 2:
                    raise HttpError(f"{method} {path}: {exc!r}") from exc
        raise AssertionError("unreachable")

    async def json(self, method: str, path: str, body: Any = None, expect: tuple[int, ...] = (200, 201)) -> Any:
        status, data = await self.request(method, path, body)
        if status not in expect:
            raise HttpError(f"{method} {path}: HTTP {status}: {data[:300]!r}")
        return orjson.loads(data) if data else None

    async def _read_response(self) -> tuple[int, bytes]:
        assert self._reader is not None
        head = await self._reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = None
        chunked = False
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        if chunked:
            body = await self._read_chunked()
        elif length is not None:
            body = await self._reader.readexactly(length)
        else:
            body = await self._reader.read()
            close = True
        if close:
            self.close()
        return status, body

    async def _read_chunked(self) -> bytes:
        assert self._reader is not None
        parts = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
