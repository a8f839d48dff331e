"""The harness's push receiver: records every delivery it gets, then answers 200.

``python -m faults.receiver PORT LOG``. For each ``POST`` it writes a ``start`` line (task id,
attempt, ``CLOCK_MONOTONIC``) before anything else, works for the payload's ``sleep_ms`` (so
deliveries are in flight when a pusher is killed), answers ``200`` with
``{"task": ..., "attempt": ...}`` as the body (which becomes the task's result: the checker
ties a done task to the delivery whose answer was recorded), and writes an ``end`` line. A
delivery whose pusher died mid-request still leaves its ``start`` line. The receiver is never
a target of faults itself, so its lines are written without fsync.

HTTP/1.1 keep-alive, bodies framed by ``Content-Length`` (what the pusher sends).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any


class Recorder:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, line: dict[str, Any]) -> None:
        # One write per line, O_APPEND: lines of concurrent deliveries never interleave.
        os.write(self.fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())


def _headers(head: bytes) -> dict[str, str]:
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().decode("latin-1").lower()] = value.strip().decode("latin-1")
    return fields


async def _serve_connection(recorder: Recorder, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            fields = _headers(head[:-4])
            body = await reader.readexactly(int(fields.get("content-length") or 0))
            task, attempt = fields.get("taskforge-task-id", ""), int(fields.get("taskforge-attempt") or 0)
            recorder.write({"e": "start", "mono": time.monotonic(), "task": task, "attempt": attempt})
            try:
                payload = json.loads(body)
            except ValueError:
                payload = {}
            await asyncio.sleep(max(0, int(payload.get("sleep_ms", 0))) / 1000)
            answer = json.dumps({"task": task, "attempt": attempt}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                         % (len(answer), answer))  # fmt: skip
            await writer.drain()
            recorder.write({"e": "end", "mono": time.monotonic(), "task": task, "attempt": attempt, "outcome": "ok"})
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the pusher closed the connection, or died (kill -9) mid-request
    finally:
        writer.close()


async def serve(port: int, log: str) -> None:
    recorder = Recorder(log)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _serve_connection(recorder, reader, writer)

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), sys.argv[2]))
