"""The Python client against a live TaskForge API (real Postgres and Redis), its
error mapping and retry policy, and that it needs no Django."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.factories import QueueFactory
from tests.integration.workers.conftest import WITHOUT_DJANGO, transitions
from tests.live import ROOT, free_port
from workers.client import (
    Conflict,
    ConnectionFailed,
    Forbidden,
    LeaseLost,
    NotFound,
    PayloadTooLarge,
    TaskForgeClient,
    TaskForgeError,
    Unauthorized,
    Unavailable,
    ValidationError,
)


def live(test):  # type: ignore[no-untyped-def]
    """Marks a test that talks to real TaskForge processes."""
    return pytest.mark.slow(pytest.mark.django_db(transaction=True)(test))


def test_worker_modules_import_and_run_without_django():
    script = WITHOUT_DJANGO.replace(
        'runpy.run_module("workers", run_name="__main__", alter_sys=True)',
        "import workers.client, workers.runner, workers.demo, workers.errors\n"
        "assert not any(m.partition('.')[0] == 'django' for m in sys.modules), sorted(sys.modules)\n"
        'runpy.run_module("workers", run_name="__main__", alter_sys=True)',
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "--handler" in done.stdout
    # The blocker itself works: the Django integration is refused under it.
    refused = subprocess.run(
        [sys.executable, "-c", WITHOUT_DJANGO.split("sys.argv =")[0] + "import workers.django_tasks\n"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode != 0
    assert "must run without Django" in refused.stderr


@live
def test_producer_and_worker_calls_round_trip(taskforge):
    QueueFactory(name="mail", retry_base_ms=100, retry_max_delay_ms=200)
    producer, worker = taskforge.client("producer"), taskforge.client("worker")

    first = producer.enqueue("mail", {"to": "a@example.com"}, priority=2, idempotency_key="welcome-a")
    replay = producer.enqueue("mail", {"to": "a@example.com"}, priority=2, idempotency_key="welcome-a")
    assert replay["id"] == first["id"]
    later = datetime.now(UTC) + timedelta(hours=1)
    batch = producer.enqueue_batch(
        "mail", [{"payload": {"n": 1}, "priority": 3}, {"payload": {"n": 2}, "scheduled_at": later, "max_retries": 0}]
    )
    assert [t["priority"] for t in batch] == [3, 5]
    assert datetime.fromisoformat(batch[1]["scheduled_at"]) == later
    assert batch[1]["max_retries"] == 0

    (claimed,) = worker.claim("w-1", "mail")
    assert claimed["id"] == first["id"] and claimed["lease_token"]
    beat = worker.heartbeat("w-1", claimed["id"], claimed["lease_token"])
    assert beat["status"] == "executing"
    done = worker.ack("w-1", claimed["id"], claimed["lease_token"], {"sent": True})
    assert (done["status"], done["result"]) == ("done", {"sent": True})
    with pytest.raises(LeaseLost) as lost:
        worker.heartbeat("w-1", claimed["id"], claimed["lease_token"])
    assert (lost.value.status, lost.value.code) == (409, "lease_lost")

    (second,) = worker.claim("w-1", "mail", max_tasks=5)  # the other one is scheduled for later
    failed = worker.nack("w-1", second["id"], "smtp down", second["lease_token"], retry_after_seconds=0)
    assert (failed["status"], failed["last_error"]) == ("retry", "smtp down")

    # Batch forms judge each item alone.
    third = producer.enqueue("mail", {"n": 3})
    fourth = producer.enqueue("mail", {"n": 4})
    leased = {t["id"]: t for t in worker.claim("w-2", "mail", max_tasks=10, wait_seconds=2)}
    assert {third["id"], fourth["id"]} <= set(leased)
    results = worker.ack_batch(
        "w-2",
        [
            {"task_id": third["id"], "lease_token": leased[third["id"]]["lease_token"], "result": {"n": 3}},
            {"task_id": claimed["id"], "lease_token": claimed["lease_token"]},
        ],
    )
    assert results[0] == {"task_id": third["id"], "status": "done"}
    assert results[1]["error"]["code"] == "lease_lost"
    nacked = worker.nack_batch(
        "w-2",
        [{"task_id": fourth["id"], "lease_token": leased[fourth["id"]]["lease_token"], "error": "x", "retry": False}],
    )
    assert nacked == [{"task_id": fourth["id"], "status": "dead"}]

    task = producer.get_task("mail", first["id"])
    assert [to for _, to, _ in transitions(task)] == ["pending", "claimed", "executing", "done"]
    stats = producer.stats("mail")
    assert stats["depth"]["done"] == 2
    assert stats["depth"]["dead"] == 1
    assert producer.cancel("mail", batch[1]["id"])["status"] == "cancelled"


@live
def test_long_poll_outlasts_the_client_timeout(taskforge):
    QueueFactory(name="mail")
    worker = taskforge.client("worker", timeout=1)
    started = time.monotonic()
    assert worker.claim("w-1", "mail", wait_seconds=2) == []
    assert 1.9 < time.monotonic() - started < 5


@live
def test_error_answers_become_exceptions_named_after_their_code(live_stack, make_key):
    QueueFactory(name="mail")
    url = live_stack.start_api(extra_env={"TASKFORGE_MAX_PAYLOAD_BYTES": "2048"})
    producer = TaskForgeClient(url, make_key("producer"))
    worker = TaskForgeClient(url, make_key("worker"))
    stranger = TaskForgeClient(url, "tf_not_a_real_key")
    try:
        with pytest.raises(Unauthorized) as caught:
            stranger.stats("mail")
        assert caught.value.status == 401
        with pytest.raises(Forbidden):
            worker.enqueue("mail", {"n": 1})
        with pytest.raises(NotFound) as caught:
            producer.enqueue("no_such_queue", {"n": 1})
        assert (caught.value.status, caught.value.code) == (404, "not_found")
        with pytest.raises(ValidationError) as caught:
            producer.enqueue("mail", {"n": 1}, priority=11)
        assert caught.value.status == 400
        assert "priority" in caught.value.fields
        producer.enqueue("mail", {"n": 1}, idempotency_key="k")
        with pytest.raises(Conflict) as caught:
            producer.enqueue("mail", {"n": 2}, idempotency_key="k")
        assert caught.value.code == "conflict"
        with pytest.raises(PayloadTooLarge):
            producer.enqueue("mail", {"blob": "x" * 4096})
        (leased,) = worker.claim("w-1", "mail")
        with pytest.raises(LeaseLost):
            worker.ack("w-2", leased["id"], leased["lease_token"])
        with pytest.raises(NotFound):
            worker.ack("w-1", "00000000-0000-0000-0000-000000000000")
        # Every one of them is a TaskForgeError, with the contract's message.
        with pytest.raises(TaskForgeError, match="does not exist"):
            producer.get_task("mail", "00000000-0000-0000-0000-000000000000")
        with pytest.raises(ValueError, match="timezone-aware"):
            producer.enqueue("mail", {"n": 1}, scheduled_at=datetime(2030, 1, 1))
    finally:
        for client in (producer, worker, stranger):
            client.close()


class CountingTransport(httpx.HTTPTransport):
    """A real HTTP transport that counts the requests it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(f"{request.method} {request.url.path}")
        return super().handle_request(request)


def test_connection_errors_are_retried_only_for_idempotent_calls():
    transport = CountingTransport()
    # Nothing listens on this port: every request is refused.
    client = TaskForgeClient(
        f"http://127.0.0.1:{free_port()}", "k", retries=2, backoff_seconds=0.01, transport=transport
    )
    calls = {
        "claim": lambda: client.claim("w", "q"),
        "heartbeat": lambda: client.heartbeat("w", "00000000-0000-0000-0000-000000000000"),
        "keyed enqueue": lambda: client.enqueue("q", {}, idempotency_key="once"),
        "read": lambda: client.get_task("q", "00000000-0000-0000-0000-000000000000"),
        "enqueue": lambda: client.enqueue("q", {}),
        "ack": lambda: client.ack("w", "00000000-0000-0000-0000-000000000000"),
        "nack": lambda: client.nack("w", "00000000-0000-0000-0000-000000000000", "e"),
    }
    sent = {}
    for name, call in calls.items():
        transport.sent.clear()
        with pytest.raises(ConnectionFailed) as caught:
            call()
        assert caught.value.status is None
        assert isinstance(caught.value, Unavailable)
        sent[name] = len(transport.sent)
    assert sent == {
        "claim": 3,
        "heartbeat": 3,
        "keyed enqueue": 3,
        "read": 3,
        "enqueue": 1,
        "ack": 1,
        "nack": 1,
    }
    client.close()


@pytest.fixture
def flaky_server() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server that answers 503 twice, then 200 (a restarting API behind a proxy)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append(self.path)
            if len(seen) % 3:
                body, status = b'{"error": {"code": "unavailable", "message": "not ready"}}', 503
            else:
                body, status = b'{"tasks": []}', 200
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_503_is_retried_with_backoff_for_claims_but_not_for_acks(flaky_server):
    url, seen = flaky_server
    with TaskForgeClient(url, "k", retries=3, backoff_seconds=0.01) as client:
        assert client.claim("w", "q") == []
        assert seen == ["/workers/claim"] * 3
        seen.clear()
        with pytest.raises(Unavailable) as caught:
            client.ack("w", "00000000-0000-0000-0000-000000000000")
        assert (caught.value.status, caught.value.code, caught.value.message) == (503, "unavailable", "not ready")
        assert seen == ["/workers/ack"]


def test_client_refuses_a_missing_key_or_timeout():
    with pytest.raises(ValueError):
        TaskForgeClient("http://localhost:8080", "")
    with pytest.raises(ValueError):
        TaskForgeClient("http://localhost:8080", "k", timeout=0)
