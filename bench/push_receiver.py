"""W9's receiver: answers every POST with ``200`` and an empty body, as fast as one asyncio process can.

``python -m bench.push_receiver PORT``. HTTP/1.1 keep-alive, bodies skipped by
their ``Content-Length``: it stands for a receiver that does no work, so the
figure is the pusher's own cost.
"""

from __future__ import annotations

import asyncio
import sys

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"


class Receiver(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self.buffer[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.transport.write(ANSWER)


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Receiver, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
