"""``GET /dashboard/stream``: the overview's live feed, as server-sent events.

Stats are computed once per tick for every listener: a ``SnapshotHub`` (one
per event loop, so one per server process) runs a single publisher task while
anyone listens, fetches ``overview.shared_snapshot()`` in a thread (never on
the event loop; it computes the stats at most once per tick across all
processes, sharing them through Redis) and hands the latest snapshot to each
listener. A hundred open dashboards cost one stats query per second, not a
hundred.

The consumer follows the pattern that notices a client leaving: the stream is
an ``asyncio`` task started by ``http_request``, which returns at once so the
consumer keeps reading ``http.disconnect``; ``disconnect()`` cancels the task.
A loop inside ``handle()`` would never see the client go and would keep
streaming into the void, blocking server shutdown.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import signal
import threading
import weakref
from collections import deque
from typing import Any

import orjson
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer

from dashboard import overview

logger = logging.getLogger("taskforge.dashboard")

TICK_SECONDS = 1.0
# The contract promises an event at least every 2 s: when the stats query is
# slower than that, the last snapshot is sent again (a keep-alive comment
# before the very first one).
KEEPALIVE_SECONDS = 1.5  # waited for before repeating; sending takes the rest of the 2 s
# Samples of each queue's completions/s kept for the sparkline (about 2 minutes).
HISTORY_POINTS = 120

SSE_HEADERS = [
    (b"Content-Type", b"text/event-stream; charset=utf-8"),
    (b"Cache-Control", b"no-cache"),
    (b"X-Accel-Buffering", b"no"),
]


# Put in a listener's inbox instead of a snapshot: end the response now.
CLOSE = None


class SnapshotHub:
    """One publisher per event loop; each listener owns a one-slot queue of the latest snapshot."""

    def __init__(self, tick: float = TICK_SECONDS) -> None:
        self.tick = tick
        self.listeners: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self.latest: dict[str, Any] | None = None
        self.computed = 0  # snapshots computed so far (tests check the sharing)
        self._history: dict[str, deque[float]] = {}
        self._last_sampled_at: str | None = None
        self._task: asyncio.Task[None] | None = None

    def subscribe(self) -> asyncio.Queue[dict[str, Any] | None]:
        inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=1)
        self.listeners.add(inbox)
        if self.latest is not None:
            inbox.put_nowait(self.latest)
        if self._task is None or self._task.done():
            # A fresh context: the publisher outlives the request that started it,
            # so it must not run its database calls in that request's thread.
            self._task = asyncio.get_running_loop().create_task(self._publish(), context=contextvars.Context())
        return inbox

    def unsubscribe(self, inbox: asyncio.Queue[dict[str, Any] | None]) -> None:
        self.listeners.discard(inbox)
        if not self.listeners and self._task is not None:
            self._task.cancel()
            self._task = None
            self.latest = None

    async def _publish(self) -> None:
        loop = asyncio.get_running_loop()
        while self.listeners:
            started = loop.time()
            try:
                snapshot = await database_sync_to_async(overview.shared_snapshot)(self.tick)
                self.computed += 1
                self.latest = self._with_history(snapshot)
                for inbox in list(self.listeners):
                    _replace(inbox, self.latest)
            except Exception:
                # Postgres down or slow: listeners get the last snapshot again; retry next tick.
                logger.exception("dashboard stats snapshot failed")
            # One tick from the start of this one: a slow stats query does not stretch the period.
            await asyncio.sleep(max(0.0, started + self.tick - loop.time()))

    def close_all(self) -> None:
        """End every open stream (the server is stopping); browsers reconnect by themselves."""
        for inbox in list(self.listeners):
            _replace(inbox, CLOSE)

    def _with_history(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        # A snapshot shared through Redis may come round twice: sample it once.
        new_sample = snapshot["at"] != self._last_sampled_at
        self._last_sampled_at = snapshot["at"]
        names = set()
        for row in snapshot["queues"]:
            names.add(row["queue"])
            points = self._history.setdefault(row["queue"], deque(maxlen=HISTORY_POINTS))
            if new_sample or not points:
                points.append(row["completed_per_sec"])
            row["throughput_history"] = list(points)
        for gone in set(self._history) - names:
            del self._history[gone]
        return snapshot


def _replace(inbox: asyncio.Queue[dict[str, Any] | None], item: dict[str, Any] | None) -> None:
    if inbox.full():
        inbox.get_nowait()  # a slow reader gets the newest item, never a backlog
    inbox.put_nowait(item)


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SnapshotHub] = weakref.WeakKeyDictionary()


def hub() -> SnapshotHub:
    """The running event loop's hub (a server process has one loop; tests have one per test)."""
    loop = asyncio.get_running_loop()
    current = _hubs.get(loop)
    if current is None:
        current = _hubs[loop] = SnapshotHub()
        _end_streams_on_server_stop(loop, current)
    return current


def _end_streams_on_server_stop(loop: asyncio.AbstractEventLoop, the_hub: SnapshotHub) -> None:
    """Let a graceful stop (SIGTERM, Ctrl-C) end the open streams instead of waiting them out.

    uvicorn stops by waiting for open responses to finish, and a stream never
    does: every open dashboard would hold a stop for the whole graceful
    timeout. So the server's own signal handler is wrapped: first end the
    streams (from the event loop), then let the server stop as usual. Only
    when a server installed a handler in this (main) thread; otherwise (a plain
    script, a test run) there is nothing to chain to and nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)
        if (
            not callable(previous)
            or previous is signal.default_int_handler
            or getattr(previous, "ends_dashboard_streams", False)
        ):
            continue

        def handler(number: int, frame: Any, previous: Any = previous) -> None:
            try:
                loop.call_soon_threadsafe(the_hub.close_all)
            except RuntimeError:
                pass  # that loop is gone: no stream left to end
            previous(number, frame)

        handler.ends_dashboard_streams = True  # type: ignore[attr-defined]
        signal.signal(signum, handler)


def encode_event(snapshot: dict[str, Any], event_id: int) -> bytes:
    return b"event: stats\nid: %d\ndata: %s\n\n" % (event_id, orjson.dumps(snapshot))


class StatsStreamConsumer(AsyncHttpConsumer):
    """Staff-only SSE stream (session login through ``AuthMiddlewareStack``; API keys are not accepted)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stream: asyncio.Task[None] | None = None

    async def http_request(self, message: dict[str, Any]) -> None:
        if message.get("more_body"):
            return  # a GET has no body worth reading; wait for its end
        user = self.scope.get("user")
        if not (user is not None and user.is_active and user.is_staff):
            await self._refuse(403, b"staff login required")
        if self.scope["method"] not in ("GET", "HEAD"):
            await self._refuse(405, b"method not allowed", [(b"Allow", b"GET")])
        await self.send_headers(status=200, headers=SSE_HEADERS)
        if self.scope["method"] == "HEAD":
            await self.send_body(b"")
            raise StopConsumer()
        # The first bytes go out at once, so proxies and browsers see an open stream.
        await self.send_body(b"retry: 2000\n: connected\n\n", more_body=True)
        self.stream = asyncio.create_task(self._stream())

    async def _stream(self) -> None:
        the_hub = hub()
        inbox = the_hub.subscribe()
        event_id = 0
        try:
            while True:
                try:
                    snapshot = await asyncio.wait_for(inbox.get(), timeout=KEEPALIVE_SECONDS)
                except TimeoutError:
                    # The stats query is slow (or failing): repeat the last snapshot (its
                    # "at" tells its age), or at least keep the connection warm.
                    if the_hub.latest is None:
                        await self.send_body(b": keep-alive\n\n", more_body=True)
                        continue
                    snapshot = the_hub.latest
                if snapshot is CLOSE:
                    await self.send_body(b"", more_body=False)
                    return
                event_id += 1
                await self.send_body(encode_event(snapshot, event_id), more_body=True)
        finally:
            the_hub.unsubscribe(inbox)

    async def disconnect(self) -> None:
        if self.stream is not None:
            self.stream.cancel()
            self.stream = None

    async def _refuse(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        await self.send_response(status, body, headers=[(b"Content-Type", b"text/plain"), *(headers or [])])
        raise StopConsumer()
