"""GET /dashboard/stream through the real ASGI application (routing, session auth, consumer)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard import stream
from queues import lifecycle
from queues.apikeys import create_key
from queues.models import Queue, Status, Task
from taskforge.asgi import application
from tests.factories import QueueFactory, TaskFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


def _session_cookie(*, staff: bool) -> list[tuple[bytes, bytes]]:
    user = get_user_model().objects.create_user(f"user-{staff}", is_staff=staff)
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    return [(b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode())]


@pytest.fixture
def staff_headers(db: None) -> list[tuple[bytes, bytes]]:
    return _session_cookie(staff=True)


def _scope(headers: list[tuple[bytes, bytes]], method: str = "GET", path: str = "/dashboard/stream") -> dict[str, Any]:
    return {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"localhost"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }


class SSEClient:
    """Reads one server-sent-events response from the ASGI app, event by event."""

    def __init__(self, headers: list[tuple[bytes, bytes]], **scope: Any) -> None:
        self.communicator = ApplicationCommunicator(application, _scope(headers, **scope))
        self.buffer = b""

    async def start(self) -> dict[str, Any]:
        await self.communicator.send_input({"type": "http.request", "body": b""})
        return await self.communicator.receive_output(timeout=5)

    async def next_event(self, timeout: float = 3.0) -> tuple[str, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while b"\n\n" not in self.buffer or not self._has_event():
            message = await self.communicator.receive_output(timeout=max(0.01, deadline - time.monotonic()))
            assert message["type"] == "http.response.body"
            assert message.get("more_body"), "the stream ended"
            self.buffer += message["body"]
        return self._pop_event()

    def _has_event(self) -> bool:
        return any(b"data: " in block for block in self.buffer.split(b"\n\n")[:-1])

    def _pop_event(self) -> tuple[str, dict[str, Any]]:
        while True:
            block, self.buffer = self.buffer.split(b"\n\n", 1)
            fields = dict(line.split(b": ", 1) for line in block.split(b"\n") if b": " in line and line[:1] != b":")
            if b"data" in fields:
                return fields[b"event"].decode(), orjson.loads(fields[b"data"])

    async def disconnect(self) -> None:
        await self.communicator.send_input({"type": "http.disconnect"})
        await self.communicator.wait(timeout=3)


def _queue_row(snapshot: dict[str, Any], name: str) -> dict[str, Any]:
    (row,) = [row for row in snapshot["queues"] if row["queue"] == name]
    return row


async def test_staff_session_gets_an_event_stream_whose_numbers_match_the_database(staff_headers):
    queue = await sync_to_async(QueueFactory)(name="mail", rate_limit=5, paused=True)
    for _ in range(3):
        await sync_to_async(TaskFactory)(queue=queue)
    await sync_to_async(TaskFactory)(queue=queue, dead=True)
    await sync_to_async(TaskFactory)(queue=queue, done=True)
    client = SSEClient(staff_headers)

    start = await client.start()
    kind, snapshot = await client.next_event(timeout=3)

    assert start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"Content-Type"].startswith(b"text/event-stream")
    assert headers[b"Cache-Control"] == b"no-cache"
    assert headers[b"X-Accel-Buffering"] == b"no"
    assert kind == "stats"
    row = _queue_row(snapshot, "mail")

    def counted(status: str) -> int:
        return Task.objects.filter(queue__name="mail", status=status).count()

    assert row["depth"]["pending"] == await sync_to_async(counted)(Status.PENDING) == 3
    assert row["depth"]["dead"] == row["dlq_depth"] == 1
    assert row["depth"]["done"] == 1
    assert (row["paused"], row["rate_limit"], row["rate_burst"]) == (True, 5, 5)
    assert {"completed_per_sec", "enqueued_per_sec", "error_rate", "oldest_pending_age_seconds"} <= set(row)
    assert row["oldest_pending_age_seconds"] >= 0
    await client.disconnect()


async def test_events_keep_coming_every_tick_and_follow_new_tasks(staff_headers):
    queue = await sync_to_async(QueueFactory)(name="live")
    client = SSEClient(staff_headers)
    await client.start()
    _, first = await client.next_event()
    assert _queue_row(first, "live")["depth"]["pending"] == 0

    await sync_to_async(lifecycle.enqueue)(queue, [lifecycle.NewTask(payload={"n": n}) for n in range(4)])
    started = time.monotonic()
    seen = []
    while time.monotonic() - started < 5:
        _, snapshot = await client.next_event(timeout=2.5)  # the contract: an event at least every 2 s
        seen.append(_queue_row(snapshot, "live")["depth"]["pending"])
        if seen[-1] == 4:
            break
    assert seen[-1] == 4, seen
    assert len(_queue_row(snapshot, "live")["throughput_history"]) >= 2
    await client.disconnect()


async def test_disconnect_stops_the_stream_and_the_publisher(staff_headers):
    await sync_to_async(QueueFactory)(name="q")
    client = SSEClient(staff_headers)
    await client.start()
    await client.next_event()
    the_hub = stream.hub()
    assert len(the_hub.listeners) == 1

    await client.disconnect()  # the consumer returns: the application future is done

    assert the_hub.listeners == set()
    computed = the_hub.computed
    await asyncio.sleep(stream.TICK_SECONDS * 2.5)
    assert the_hub.computed == computed  # no publisher left running for nobody


async def test_listeners_share_one_snapshot_per_tick(staff_headers):
    await sync_to_async(QueueFactory)(name="shared")
    clients = [SSEClient(staff_headers) for _ in range(4)]
    for client in clients:
        await client.start()
    for _ in range(3):
        for client in clients:
            await client.next_event()
    # Four listeners got three events each; a per-connection query would have made 12 or more.
    assert stream.hub().computed <= 5
    for client in clients:
        await client.disconnect()


@pytest.mark.parametrize("who", ["anonymous", "non_staff", "api_key"])
async def test_the_stream_is_refused_without_a_staff_session(who, db):
    if who == "non_staff":
        headers = await sync_to_async(_session_cookie)(staff=False)
    elif who == "api_key":
        _, raw = await sync_to_async(create_key)("admin-key", "admin")
        headers = [(b"authorization", f"Bearer {raw}".encode())]
    else:
        headers = []
    client = SSEClient(headers)

    start = await client.start()
    body = await client.communicator.receive_output(timeout=2)

    assert start["status"] == 403
    assert not body.get("more_body")
    await client.communicator.wait(timeout=2)


async def test_only_get_is_allowed(staff_headers):
    client = SSEClient(staff_headers, method="POST")
    start = await client.start()
    assert start["status"] == 405
    await client.communicator.wait(timeout=2)


async def test_a_queue_created_while_streaming_appears(staff_headers):
    client = SSEClient(staff_headers)
    await client.start()
    _, first = await client.next_event()
    assert first["queues"] == []
    await sync_to_async(Queue.objects.create)(name="fresh")
    for _ in range(4):
        _, snapshot = await client.next_event()
        if snapshot["queues"]:
            break
    assert [row["queue"] for row in snapshot["queues"]] == ["fresh"]
    await client.disconnect()


async def test_close_all_ends_open_streams_so_a_server_can_stop(staff_headers):
    await sync_to_async(QueueFactory)(name="q")
    client = SSEClient(staff_headers)
    await client.start()
    await client.next_event()

    stream.hub().close_all()  # what a SIGTERM to the server process triggers

    while True:
        message = await client.communicator.receive_output(timeout=3)
        if not message.get("more_body"):
            break
    assert message["type"] == "http.response.body"
    await client.disconnect()
    assert stream.hub().listeners == set()
