"""The change watch: one subscription per process in place of a generation GET per request."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings

from faults.services import RedisServer
from queues.apikeys import create_key
from taskforge.dev import launcher
from taskforge.infra import change_watch, rowcache
from taskforge.infra.redis import redis_client
from tests.conftest import redis_at
from tests.push_receiver import wait_until

pytestmark = pytest.mark.django_db


def _listening_watch() -> change_watch.ChangeWatch:
    watch = change_watch.current()
    assert watch is not None
    assert watch.wait_listening(5.0), "the watch did not subscribe"
    return watch


def _watch_connection_id(client: redis.Redis, watch: change_watch.ChangeWatch) -> int:
    (found,) = [c for c in client.client_list() if c["name"] == watch.client_name]
    return int(found["id"])


def test_once_announce_returns_no_request_takes_the_old_tag():
    watch = _listening_watch()
    for _ in range(200):  # the announcement races the watch's thread every time
        before = watch.heard()
        assert before is not None
        change_watch.announce(redis_client(), rowcache.GENERATION_KEY)
        after = watch.heard()
        assert after is not before  # None (news arriving: ask Redis) or the renewed tag
        wait_until(lambda: watch.heard() is not None, 2.0, interval=0.001)


@pytest.mark.django_db(transaction=True)  # the other process sees the key only once it is committed
def test_a_revocation_by_another_process_is_refused_by_the_next_request(client, live_stack):
    _listening_watch()
    _, raw = create_key("revoked-by-command", "producer")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert client.get("/queues", **auth).status_code == 200  # cached here, under the watch's tag
    subprocess.run(
        launcher.manage_py("revoke_api_key", "revoked-by-command"), cwd=launcher.ROOT, env=live_stack.env, check=True
    )
    assert client.get("/queues", **auth).status_code == 401


def test_a_killed_subscription_is_noticed_at_once_and_made_anew():
    watch = _listening_watch()
    before = watch.heard()
    client = redis_client()
    client.client_kill_filter(_id=_watch_connection_id(client, watch))
    if watch.heard() is not None:  # else the kill is already seen: no request takes the old tag
        wait_until(lambda: watch.heard() is not before, 1.0, interval=0.01)
    change_watch.announce(client, rowcache.GENERATION_KEY)  # while it reconnects
    wait_until(lambda: watch.heard() not in (None, before), 5.0)  # listening again, copies renewed


def test_the_start_of_a_reply_counts_as_news():
    pubsub = redis_client().pubsub()
    try:
        pubsub.subscribe("tf:test:partly-read")
        assert pubsub.get_message(timeout=2)["type"] == "subscribe"
        assert not change_watch._partly_read(pubsub)  # else every PONG would drop this process's copies
        pubsub.connection._parser._reader.feed(b"*3\r\n$7\r\nmessage\r\n$3\r\nab")  # as a torn read leaves it
        assert change_watch._partly_read(pubsub)
    finally:
        pubsub.close()


def test_a_watch_works_past_1024_descriptors():
    held = [socket.socket() for _ in range(1100)]  # a busy API process holds this many (clients, pools)
    watch = change_watch.ChangeWatch(settings.REDIS_URL)
    try:
        assert watch.wait_listening(5.0)
        assert watch._socket is not None and watch._socket.fileno() > 1024
        before = watch.heard()
        assert before is not None  # select() would refuse this descriptor: every request would ask Redis
        change_watch.announce(redis_client(), rowcache.GENERATION_KEY)
        wait_until(lambda: watch.heard() not in (None, before), 2.0)
    finally:
        watch.stop()
        for sock in held:
            sock.close()


@pytest.fixture
def own_redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    try:
        with redis_at(server.url, monkeypatch):
            yield server
    finally:
        if server.process is not None and server.process.poll() is None:
            server.process.send_signal(signal.SIGCONT)
        server.shutdown()


@pytest.mark.slow
def test_a_silent_redis_is_given_up_and_the_cache_falls_back_to_the_generation(own_redis):
    watch = _listening_watch()
    assert own_redis.process is not None
    own_redis.process.send_signal(signal.SIGSTOP)  # the connection stays open; nothing answers
    try:
        started = time.monotonic()
        wait_until(lambda: not watch.listening, change_watch.SILENCE_SECONDS + 3 * change_watch.PING_SECONDS)
        assert time.monotonic() - started < rowcache.MAX_AGE_SECONDS
        assert watch.heard() is None
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
    wait_until(lambda: watch.listening, 10.0)


@pytest.mark.slow
def test_a_restarted_redis_is_listened_to_again(own_redis):
    watch = _listening_watch()
    before = watch.heard()
    assert own_redis.process is not None
    own_redis.process.kill()
    own_redis.process.wait()
    wait_until(lambda: watch.heard() is None, 1.0)
    own_redis.start()  # the same port
    wait_until(lambda: watch.heard() not in (None, before), 10.0)


def test_a_cluster_has_no_watch(monkeypatch):
    monkeypatch.setattr(settings, "REDIS_URL", "redis+cluster://127.0.0.1:7000")
    assert change_watch.current() is None
