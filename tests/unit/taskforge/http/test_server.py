"""The API's HTTP protocol (taskforge.http.server) over a real loopback socket: one write per answer of known length.

The protocol runs under a real asyncio server; each test's transport is the
real one, seen through a wrapper that notes every write before passing it on.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from taskforge.http.server import OneWriteProtocol

JSON_BODY = b'{"ok": true}'


class _Noted:
    """The real transport, noting what is written to it."""

    def __init__(self, transport: Any, writes: list[bytes]) -> None:
        self._transport = transport
        self._writes = writes

    def write(self, data: bytes) -> None:
        self._writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


async def _serve(app: Any, writes: list[bytes]) -> asyncio.Server:
    config = Config(app=app, http=OneWriteProtocol, lifespan="off", log_config=None)
    config.load()
    state = ServerState()

    class Noting(OneWriteProtocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(_Noted(transport, writes))

    return await asyncio.get_running_loop().create_server(
        lambda: Noting(config=config, server_state=state, app_state={}), "127.0.0.1", 0
    )


async def _json_app(scope: Any, receive: Any, send: Any) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(JSON_BODY)).encode())]
    await send({"type": "http.response.start", "status": 201, "headers": headers})
    await send({"type": "http.response.body", "body": JSON_BODY})


def test_an_answer_of_known_length_is_one_write_of_headers_and_body():
    async def scenario() -> tuple[list[bytes], bytes]:
        writes: list[bytes] = []
        server = await _serve(_json_app, writes)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):  # keep-alive: each answer of the connection alike
            writer.write(b"POST /q HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}")
            head = await reader.readuntil(b"\r\n\r\n")
            body = await reader.readexactly(len(JSON_BODY))
        writer.close()
        server.close()
        await server.wait_closed()
        return writes, head + body

    writes, answer = asyncio.run(scenario())
    assert len(writes) == 2  # one per answer
    assert all(write.startswith(b"HTTP/1.1 201 Created\r\n") and write.endswith(JSON_BODY) for write in writes)
    assert answer == writes[-1]


def test_a_head_request_gets_its_headers_though_no_body_is_written():
    """uvicorn writes no body for a HEAD: the headers are not held for one."""

    async def scenario() -> tuple[list[bytes], bytes]:
        writes: list[bytes] = []
        server = await _serve(_json_app, writes)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"HEAD /q HTTP/1.1\r\nHost: t\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.close()
        server.close()
        await server.wait_closed()
        return writes, head

    writes, head = asyncio.run(scenario())
    assert head.startswith(b"HTTP/1.1 201 Created\r\n") and b"content-length: 12" in head
    assert writes == [head]


def test_a_stream_has_its_headers_written_before_its_first_event():
    """No content-length: the headers go at once, so the client sees them while the stream waits."""

    async def scenario() -> list[bytes]:
        writes: list[bytes] = []
        headers_seen = asyncio.Event()

        async def stream_app(scope: Any, receive: Any, send: Any) -> None:
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            await headers_seen.wait()  # set by the client only once it has read the headers
            await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": False})

        server = await _serve(stream_app, writes)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /events HTTP/1.1\r\nHost: t\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert b"transfer-encoding: chunked" in head
        headers_seen.set()
        await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5)
        writer.close()
        server.close()
        await server.wait_closed()
        return writes

    writes = asyncio.run(scenario())
    assert len(writes) == 2 and writes[0].endswith(b"\r\n\r\n") and b"data: 1" in writes[1]
