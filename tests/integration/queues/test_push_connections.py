"""The pusher's HTTP/1.1 client against real loopback servers that answer byte for byte as told:
keep-alive reuse, the answer framings, the 64 KiB cut, timeouts and the bound on connections.

No database: ``Deliverer`` and its ``ConnectionPool`` run on an event loop of the test, and each
server counts the connections it accepted, so reuse (or its absence) is observed, not assumed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from queues.push.delivery import MAX_ANSWER_BYTES, Deliverer, Delivery

#: What a server does with one request: the bytes it answers (None: it closes the connection instead).
Script = Callable[[int], Awaitable[bytes | None]]


def ok(body: bytes = b"", *, close: bool = False) -> bytes:
    connection = b"connection: close\r\n" if close else b""
    return b"HTTP/1.1 200 OK\r\n%scontent-length: %d\r\n\r\n%s" % (connection, len(body), body)


@dataclass
class Server:
    script: Script
    connections: int = 0
    requests: int = 0
    open_now: int = 0
    most_open: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(
                    b"content-length:"))  # fmt: skip
                await reader.readexactly(length)
                self.requests += 1
                answer = await self.script(self.requests)
                if answer is None:
                    return
                writer.write(answer)
                await writer.drain()
                if b"connection: close" in answer.lower():
                    return  # an answer that ends where the connection does
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open_now -= 1
            writer.close()


@contextlib.asynccontextmanager
async def serving(script: Script) -> AsyncIterator[tuple[Server, str]]:
    server = Server(script)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield server, f"http://127.0.0.1:{port}/hook"
    finally:
        listener.close()
        for writer in server.writers:
            writer.close()


def delivery(url: str, timeout_seconds: int = 5) -> Delivery:
    return Delivery("00000000-0000-0000-0000-000000000001", "hooks", 1, None, {"n": 1}, url, timeout_seconds, {}, ["s"])


def run(test: Callable[[Deliverer], Awaitable[None]], max_connections: int = 10) -> None:
    async def main() -> None:
        deliverer = Deliverer(max_connections=max_connections, allow_private=True)
        try:
            await test(deliverer)
        finally:
            await deliverer.close()

    asyncio.run(main())


def test_deliveries_to_one_receiver_reuse_one_keep_alive_connection() -> None:
    async def test(deliverer: Deliverer) -> None:
        async with serving(lambda n: _now(ok(b'{"n": %d}' % n))) as (server, url):
            answers = [await deliverer.deliver(delivery(url)) for _ in range(5)]
        assert [(a.kind, a.status, a.body) for a in answers] == [
            ("answered", 200, b'{"n": %d}' % n) for n in range(1, 6)
        ]
        assert server.connections == 1

    run(test)


def test_a_chunked_answer_and_one_ended_by_closing_are_read_whole() -> None:
    chunked = (
        b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\nx-a: 1\r\n\r\n"
        b'4\r\n{"a"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\n\r\n'
    )
    until_close = b'HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n{"b": 2}'

    async def script(n: int) -> bytes | None:
        return chunked if n == 1 else until_close

    async def test(deliverer: Deliverer) -> None:
        async with serving(script) as (server, url):
            first = await deliverer.deliver(delivery(url))
            second = await deliverer.deliver(delivery(url))
            third = await deliverer.deliver(delivery(url))
        assert (first.status, first.body, first.headers["x-a"]) == (201, b'{"a": 1}', "1")
        assert (second.status, second.body, second.truncated) == (200, b'{"b": 2}', False)
        assert third.body == b'{"b": 2}'
        # The chunked answer kept the connection; the one ended by closing it did not.
        assert server.connections == 2

    run(test)


def test_an_answer_longer_than_the_limit_is_cut_and_its_connection_not_reused() -> None:
    big = b"x" * (MAX_ANSWER_BYTES * 3)

    async def test(deliverer: Deliverer) -> None:
        async with serving(lambda n: _now(ok(big))) as (server, url):
            first = await deliverer.deliver(delivery(url))
            second = await deliverer.deliver(delivery(url))
        assert (first.status, len(first.body), first.truncated) == (200, MAX_ANSWER_BYTES, True)
        assert (second.status, second.truncated) == (200, True)
        assert server.connections == 2, "the rest of a cut answer must never be read as the next one"

    run(test)


def test_an_answer_that_comes_after_the_timeout_is_never_taken_for_the_next_one() -> None:
    async def script(n: int) -> bytes:
        if n == 1:
            await asyncio.sleep(1.5)  # past the first delivery's deadline
            return ok(b'{"late": true}')
        return ok(b'{"n": %d}' % n)

    async def test(deliverer: Deliverer) -> None:
        async with serving(script) as (server, url):
            late = await deliverer.deliver(delivery(url, timeout_seconds=1))
            after = await deliverer.deliver(delivery(url))
        assert (late.kind, late.error) == ("timeout", "timed out after 1 s")
        assert (after.status, after.body) == (200, b'{"n": 2}')
        assert server.connections == 2

    run(test)


def test_a_keep_alive_connection_the_receiver_closed_is_replaced() -> None:
    async def test(deliverer: Deliverer) -> None:
        async with serving(lambda n: _now(ok())) as (server, url):
            assert (await deliverer.deliver(delivery(url))).status == 200
            for writer in server.writers:
                writer.close()  # the receiver's idle timeout, say
            await asyncio.sleep(0.1)
            again = await deliverer.deliver(delivery(url))
        assert (again.kind, again.status) == ("answered", 200)
        assert server.connections == 2

    run(test)


def test_a_receiver_that_closes_without_an_answer_is_a_connection_error() -> None:
    async def test(deliverer: Deliverer) -> None:
        async with serving(lambda n: _now(None)) as (_, url):
            answer = await deliverer.deliver(delivery(url))
        assert answer.kind == "connection_error"
        assert answer.error is not None and "closed before the answer was complete" in answer.error

    run(test)


def test_no_more_connections_are_open_than_the_bound() -> None:
    async def slow(n: int) -> bytes:
        await asyncio.sleep(0.2)
        return ok()

    async def test(deliverer: Deliverer) -> None:
        async with serving(slow) as (server, url):
            answers = await asyncio.gather(*(deliverer.deliver(delivery(url)) for _ in range(10)))
        assert [a.status for a in answers] == [200] * 10
        assert server.most_open == 3 and server.connections == 3

    run(test, max_connections=3)


async def _now(answer: bytes | None) -> bytes | None:
    return answer
