"""The client's own keep-alive connections (``taskforge_client.connections``) against a real HTTP server.

A plain ``http://`` client sends through the standard library's
``http.client``; these tests run a threaded HTTP/1.1 server on a loopback
port that records every request and every TCP connection it accepts, and
answers, closes or stalls as each test tells it to. What the client sends
must be what it sends through httpx (the rest of the unit tests use httpx's
in-process transport), and every way a connection can end must end in an
answer or in ``ConnectionFailed``, never in a hang or a wrong answer.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from taskforge_client import ConnectionFailed, LeaseLost, TaskForgeClient, Unavailable
from taskforge_client import client as client_module
from taskforge_client.connections import HttpxSender, PooledSender, lean_pool_for

TASK_ID = uuid.UUID("0b4e3f8c-2d6a-4c1e-9f10-5a7b8c9d0e1f")


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int  # which accepted TCP connection carried it


@dataclass
class Behaviour:
    """How the server answers: ``answer(seen)`` gives (status, headers, body); ``close_after`` drops the socket."""

    answer: Callable[[Seen], tuple[int, dict[str, str], bytes]] = lambda seen: (200, {}, seen.body or b"{}")
    close_after: bool = False
    stall_seconds: float = 0.0


@dataclass
class Server:
    url: str
    behaviour: Behaviour
    requests: list[Seen] = field(default_factory=list)
    connections: int = 0
    _handlers: list[BaseHTTPRequestHandler] = field(default_factory=list)

    def drop_idle_connections(self) -> None:
        """Close every accepted socket, as a server's keep-alive timeout does."""
        for handler in self._handlers:
            handler.connection.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(url="", behaviour=Behaviour())
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive unless told otherwise

        def setup(self) -> None:
            super().setup()
            with lock:
                state.connections += 1
                self.number = state.connections
                state._handlers.append(self)

        def log_message(self, format: str, *args: object) -> None:
            pass

        def handle_one(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            seen = Seen(self.command, self.path, dict(self.headers.items()), self.rfile.read(length), self.number)
            with lock:
                state.requests.append(seen)
            behaviour = state.behaviour
            if behaviour.stall_seconds:
                time.sleep(behaviour.stall_seconds)
            status, headers, body = behaviour.answer(seen)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if "Transfer-Encoding" not in headers:
                self.send_header("Content-Length", str(len(body)))
            if behaviour.close_after:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = do_DELETE = handle_one

    class Quiet(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client that timed out and hung up makes the late answer's write fail: expected here

    httpd = Quiet(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    recorded: list[float] = []
    monkeypatch.setattr(client_module.time, "sleep", recorded.append)
    return recorded


def lean_client(url: str, **options: object) -> TaskForgeClient:
    client = TaskForgeClient(url, "tf_key", **options)  # type: ignore[arg-type]
    assert isinstance(client._sender, PooledSender), "a plain http:// client sends through http.client"
    return client


# --- which transport a client uses ---------------------------------------------------------------


def test_only_a_plain_http_url_without_a_proxy_gets_the_lean_pool(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert lean_pool_for("http://api.internal:8000", {}) is not None
    assert lean_pool_for("https://api.internal", {}) is None  # TLS goes through httpx and its trust store
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    assert lean_pool_for("http://api.internal:8000", {}) is None  # httpx honours the proxy
    monkeypatch.setenv("NO_PROXY", "api.internal")
    assert lean_pool_for("http://api.internal:8000", {}) is not None
    with TaskForgeClient("http://api.internal", "k", transport=httpx.HTTPTransport()) as given:
        assert isinstance(given._sender, HttpxSender)  # a transport of the caller's is always used


# --- what is sent --------------------------------------------------------------------------------


def test_the_lean_path_sends_what_the_httpx_path_sends(server):
    through_httpx = TaskForgeClient(server.url, "tf_key", transport=httpx.HTTPTransport())
    with lean_client(server.url) as lean, through_httpx:
        for client in (lean, through_httpx):
            client.enqueue("mail", {"to": "é@example.com", "n": 1.5}, priority=2)
            client.ack("w-1", TASK_ID, "lease", {"ok": True})
            client.control_worker("w-1", "quiet")  # a POST without a body
            client.stats("mail queue")
    by_lean, by_httpx = server.requests[:4], server.requests[4:]
    for lean_request, httpx_request in zip(by_lean, by_httpx, strict=True):
        assert (lean_request.method, lean_request.path) == (httpx_request.method, httpx_request.path)
        assert lean_request.body == httpx_request.body
        for name in ("Authorization", "User-Agent", "Accept", "Content-Type", "Content-Length", "Host"):
            assert lean_request.headers.get(name) == httpx_request.headers.get(name), name
    assert json.loads(by_lean[0].body) == {"payload": {"to": "é@example.com", "n": 1.5}, "priority": 2}
    assert by_lean[2].headers["Content-Length"] == "0"
    assert by_lean[3].path == "/queues/mail%20queue/stats"


def test_a_base_url_with_a_path_keeps_it(server):
    with lean_client(server.url + "/taskforge/") as client:
        client.stats("mail")
    assert server.requests[-1].path == "/taskforge/queues/mail/stats"
    with lean_client(server.url + "/task forge") as client:
        client.stats("mail")
    assert server.requests[-1].path == "/task%20forge/queues/mail/stats"


def test_a_payload_that_is_not_json_is_refused_before_anything_is_sent(server):
    with lean_client(server.url) as client, pytest.raises(ValueError):
        client.enqueue("mail", {"n": float("nan")})
    assert server.requests == []


# --- connections ---------------------------------------------------------------------------------


def test_sequential_calls_share_one_connection(server):
    with lean_client(server.url) as client:
        for n in range(25):
            assert client.enqueue("mail", {"n": n})["payload"] == {"n": n}  # the server echoes the body
    assert server.connections == 1


def test_an_idle_connection_the_server_closed_is_replaced_without_an_error(server):
    with lean_client(server.url, retries=0) as client:
        client.stats("mail")
        server.drop_idle_connections()
        time.sleep(0.05)
        assert client.enqueue("mail", {"after": "drop"})["payload"] == {"after": "drop"}
    assert server.connections == 2


def test_an_answer_that_closes_the_connection_is_read_and_the_next_call_reconnects(server):
    server.behaviour.close_after = True
    with lean_client(server.url, retries=0) as client:
        for n in range(3):
            assert client.enqueue("mail", {"n": n})["payload"] == {"n": n}
    assert server.connections == 3


def test_a_chunked_answer_is_read_whole(server):
    def chunked(seen: Seen) -> tuple[int, dict[str, str], bytes]:
        body = json.dumps({"tasks": [{"id": str(n)} for n in range(50)]}).encode()
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + 64]), body[i : i + 64]) for i in range(0, len(body), 64))
        return 200, {"Transfer-Encoding": "chunked", "Content-Type": "application/json"}, chunks + b"0\r\n\r\n"

    server.behaviour.answer = chunked
    with lean_client(server.url) as client:
        assert [task["id"] for task in client.claim("w-1", "mail", max_tasks=50)] == [str(n) for n in range(50)]
        assert len(client.claim("w-1", "mail")) == 50  # the connection was left at the next answer
    assert server.connections == 1


def test_threads_sharing_a_client_each_get_their_own_answer(server):
    failures: list[str] = []

    def produce(worker: int) -> None:
        for n in range(40):
            payload = {"worker": worker, "n": n}
            echoed = client.enqueue("mail", payload)["payload"]
            if echoed != payload:
                failures.append(f"{payload} got {echoed}")

    with lean_client(server.url) as client:
        threads = [threading.Thread(target=produce, args=(worker,)) for worker in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
    assert len(server.requests) == 320
    assert 1 <= server.connections <= 8  # reused across calls, at most one per thread in flight


# --- failures ------------------------------------------------------------------------------------


def test_a_refused_connection_is_connection_failed_after_the_retries(no_pauses):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with lean_client(f"http://127.0.0.1:{port}", retries=2) as client, pytest.raises(ConnectionFailed) as caught:
        client.claim("w-1", "mail")
    assert f"POST http://127.0.0.1:{port}/workers/claim" in caught.value.message
    assert isinstance(caught.value, Unavailable)
    assert len(no_pauses) == 2


def test_a_server_that_never_answers_times_out_as_connection_failed(server):
    server.behaviour.stall_seconds = 2.0
    with lean_client(server.url, retries=0, timeout=0.3) as client:
        started = time.monotonic()
        with pytest.raises(ConnectionFailed, match="timed out"):
            client.enqueue("mail", {})
        assert time.monotonic() - started < 1.5
        server.behaviour.stall_seconds = 0.0
        assert client.enqueue("mail", {"n": 2})["payload"] == {"n": 2}  # a fresh connection, not the stalled one


def test_a_per_call_timeout_outlasts_the_client_default(server):
    server.behaviour.stall_seconds = 0.5
    server.behaviour.answer = lambda seen: (200, {}, b'{"tasks": []}')
    with lean_client(server.url, retries=0, timeout=0.2) as client:
        assert client.claim("w-1", "mail", wait_seconds=1) == []  # a long poll may take wait_seconds + a margin


def test_error_answers_and_retry_after_work_over_the_lean_path(server, no_pauses):
    answers = iter(
        [
            (503, {"Retry-After": "2"}, b'{"error": {"code": "unavailable", "message": "busy"}}'),
            (200, {}, b'{"tasks": []}'),
            (409, {}, b'{"error": {"code": "lease_lost", "message": "gone"}}'),
        ]
    )
    server.behaviour.answer = lambda seen: next(answers)
    with lean_client(server.url) as client:
        assert client.claim("w-1", "mail") == []
        with pytest.raises(LeaseLost) as caught:
            client.ack("w-1", TASK_ID, "lease")
    assert no_pauses and no_pauses[0] >= 2.0
    assert (caught.value.code, caught.value.status, caught.value.message) == ("lease_lost", 409, "gone")
