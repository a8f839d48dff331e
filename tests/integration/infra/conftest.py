"""Fixtures of the infrastructure tests."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis

from tests.live import free_port


@pytest.fixture
def own_redis(settings) -> Iterator[subprocess.Popen[bytes]]:
    """A redis-server of the test's own, with a password, reached on database 3: this test stops it."""
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--requirepass", "sesame"],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=port, password="sesame", socket_timeout=1).ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        settings.REDIS_URL = f"redis://:sesame@127.0.0.1:{port}/3"
        yield server
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait(10)
