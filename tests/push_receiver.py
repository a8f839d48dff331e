"""A real HTTP receiver on loopback for push tests: records every delivery and answers as told.

It runs in a thread of the test process (a threading HTTP server, one thread per request), so
it measures what the pushers really do: how many requests are in flight at once, which headers
and bodies arrive, and when.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() when it arrived

    @property
    def task_id(self) -> str:
        return self.headers["taskforge-task-id"]

    @property
    def attempt(self) -> int:
        return int(self.headers["taskforge-attempt"])


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    #: seconds to wait before answering
    delay: float = 0.0


Respond = Callable[[Received], Reply]


class Receiver:
    def __init__(self, respond: Respond | None = None, *, tls: ssl.SSLContext | None = None) -> None:
        self.respond: Respond = respond or (lambda _: Reply())
        self.received: list[Received] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                got = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length),
                               time.monotonic())  # fmt: skip
                with receiver.lock:
                    receiver.received.append(got)
                    receiver.in_flight += 1
                    receiver.max_in_flight = max(receiver.max_in_flight, receiver.in_flight)
                try:
                    reply = receiver.respond(got)
                    if reply.delay:
                        receiver.stopping.wait(reply.delay)
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the pusher gave up (its timeout): what the test wanted
                finally:
                    with receiver.lock:
                        receiver.in_flight -= 1

            def log_message(self, format: str, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            # The default backlog of 5 refuses connections when dozens of deliveries arrive at once.
            request_queue_size = 1024

        self.server = Server(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}/hook"

    def of(self, task_id: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.task_id == task_id]

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver()
    try:
        yield got
    finally:
        got.stop()


def wait_until(check: Callable[[], object], timeout: float = 20.0, interval: float = 0.05) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout} s")
        time.sleep(interval)
