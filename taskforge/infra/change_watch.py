"""One subscription per process that hears of every change to keys and queues.

:mod:`taskforge.infra.rowcache` tags its copies with the generation they were
read under. Reading that generation from Redis cost every API request a round
trip (a sixth of a single enqueue's CPU). Instead, each process keeps one
connection subscribed to the change channel, on a thread of its own; whoever
changes a key or a queue bumps the generation and publishes on the channel in
one pipeline (:func:`announce`). While the subscription is up, the tag a
request uses is the one this thread holds, renewed at every message.

"At once" stays what the ``GET`` gave: a request that begins after the change
was announced does not use a copy read before it. A message that has reached
this process but is not yet read keeps the subscription's socket readable; one
being read is flagged (``_reading``) until the tag is renewed, and one read
only in part renews the tag at once. A request seeing
either, or no live subscription (starting, Redis down, reconnecting), asks
Redis as before. A connection that silently stops delivering (a partition) is
noticed by its unanswered pings within ``SILENCE_SECONDS``, below the copies'
``MAX_AGE_SECONDS``.

A Redis Cluster has no watch: there every request still reads the generation.
(Classic pub/sub on a Cluster is copied to every node; the doorbells use the
sharded form, whose subscription a slot migration ends.)
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time

import redis
from django.conf import settings

from taskforge.infra.redis import Client, cluster_target, connect, database_number, is_cluster

logger = logging.getLogger("taskforge.infra.change_watch")

#: How long the subscription may stay quiet before the watch pings it.
PING_SECONDS = 1.0
#: No answer at all for this long: the connection is taken for dead and made anew.
SILENCE_SECONDS = 3.0
CHANNEL_PREFIX = "tf:config:changed:"


def channel(url: str) -> str:
    """The change channel of the deployment on ``url`` (pub/sub ignores database numbers)."""
    return f"{CHANNEL_PREFIX}{database_number(url)}"


def announce(client: Client, generation_key: str) -> None:
    """Bump the generation and tell every watching process, in that order (one round trip)."""
    if is_cluster(client):
        client.incr(generation_key)  # no watches there: the bump is read by every request
        return
    pipe = client.pipeline(transaction=False)
    pipe.incr(generation_key)
    pipe.publish(channel(settings.REDIS_URL), b"")
    pipe.execute()


def _readable(sock: socket.socket, timeout: float) -> bool:
    """Whether ``sock`` has bytes (or its end) to read, waiting up to ``timeout`` seconds.

    ``poll``, not ``select``: an API process may hold more than 1,024 descriptors.
    A fresh poll object each time: requests on several threads ask at once.
    """
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def _partly_read(pubsub: redis.client.PubSub) -> bool:
    """Whether the connection's parser holds the start of a reply not complete yet (or cannot tell)."""
    connection = pubsub.connection
    parser = getattr(connection, "_parser", None)
    reader = getattr(parser, "_reader", None)  # hiredis' (in the lock)
    if reader is not None:
        return bool(reader.has_data())
    buffer = getattr(parser, "_buffer", None)  # redis-py's own parser
    if buffer is not None:
        return bool(buffer.unread_bytes())
    return True


class ChangeWatch:
    """A thread subscribed to the change channel of ``url``; :meth:`heard` is what requests ask."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.channel = channel(url)
        self.client_name = f"taskforge-changes-{os.getpid()}"  # what CLIENT LIST shows for it
        # The current tag while subscribed (a new object per change heard); None while not.
        self._tag: object | None = None
        self._socket: socket.socket | None = None
        self._reading = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="taskforge-change-watch", daemon=True)
        self._thread.start()

    def heard(self) -> object | None:
        """The tag of the keys and queues as they stand; None: ask Redis (not listening, or news arriving)."""
        sock = self._socket
        if sock is None or self._tag is None or self._reading:
            return None
        try:
            arriving = _readable(sock, 0)
        except (OSError, ValueError):  # closed meanwhile by the watch's thread
            return None
        if arriving or self._reading:
            return None
        return self._tag  # read again: renewed if a message was read since the first look

    @property
    def listening(self) -> bool:
        return self._tag is not None

    def wait_listening(self, timeout: float) -> bool:
        """Block until subscribed (for tests and for startup checks); False if not within ``timeout``."""
        deadline = time.monotonic() + timeout
        while not self.listening and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.listening

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        backoff = 0.2
        while not self._stopped.is_set():
            client = pubsub = None
            listened = False
            try:
                client = connect(self.url, socket_connect_timeout=2, socket_timeout=2, client_name=self.client_name)
                pubsub = client.pubsub()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                pubsub.subscribe(self.channel)
                confirmation = pubsub.get_message(timeout=2)
                if confirmation is None or confirmation["type"] != "subscribe":
                    raise redis.ConnectionError("the change channel's subscription was not confirmed")
                assert pubsub.connection is not None
                self._socket = pubsub.connection._sock  # redis-py keeps it private; only polled here
                self._tag = object()  # anything may have changed while nobody listened
                backoff = 0.2
                listened = True
                self._listen(pubsub)
            except (redis.RedisError, OSError) as exc:
                # Once per outage: while Redis stays down, requests read the generation (and fail over to no cache).
                if listened and not self._stopped.is_set():
                    logger.warning(
                        "change watch lost its subscription: %s", exc, extra={"event": "changes.disconnected"}
                    )
            except Exception:  # the thread must outlive any surprise: requests fall back meanwhile
                logger.exception("change watch failed", extra={"event": "changes.failed"})
            finally:
                self._tag = None
                self._socket = None
                for closable in (pubsub, client):
                    if closable is not None:
                        try:
                            closable.close()
                        except (redis.RedisError, OSError):
                            pass
            self._stopped.wait(backoff)
            backoff = min(backoff * 2, 5.0)

    def _listen(self, pubsub: redis.client.PubSub) -> None:
        assert self._socket is not None
        heard_at = time.monotonic()
        while not self._stopped.is_set():
            if not _readable(self._socket, PING_SECONDS):
                if time.monotonic() - heard_at > SILENCE_SECONDS:
                    raise redis.ConnectionError(f"no answer from Redis for {SILENCE_SECONDS}s")
                pubsub.ping()
                continue
            heard_at = time.monotonic()
            self._reading = True
            try:
                changed = False
                while (message := pubsub.get_message(timeout=0)) is not None:
                    if message["type"] == "message":
                        changed = True
                    elif message["type"] == "unsubscribe":
                        raise redis.ConnectionError("unsubscribed from the change channel")
                if pubsub.connection is None or pubsub.connection._sock is not self._socket:
                    # redis-py reconnected inside the read: what was published meanwhile is lost.
                    raise redis.ConnectionError("the subscription's connection was made anew")
                if changed or _partly_read(pubsub):
                    # Part of a reply is in: if it is a change, the change has committed already.
                    self._tag = object()
            except BaseException:
                self._tag = None  # before _reading drops: no request may take the old tag meanwhile
                raise
            finally:
                self._reading = False


_watch: ChangeWatch | None = None
_lock = threading.Lock()


def current() -> ChangeWatch | None:
    """This process's watch of ``REDIS_URL``, started at first use; None on a Cluster."""
    watch = _watch
    url = settings.REDIS_URL
    if watch is not None and watch.url == url:
        return watch
    if cluster_target(url) is not None:
        return None
    return _start(url)


def _start(url: str) -> ChangeWatch:
    global _watch
    with _lock:
        if _watch is None or _watch.url != url:
            if _watch is not None:
                _watch.stop()  # REDIS_URL changed (tests do): watch the new one
            _watch = ChangeWatch(url)
        return _watch


def _forget_after_fork() -> None:
    global _watch, _lock
    _watch = None  # its thread stayed in the parent
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
