"""Shared fixtures: real Postgres (pytest-django's test database) and real Redis.

Each xdist worker gets its own Redis database, flushed around every test,
except in ``tests/unit``, which runs with Postgres and Redis stopped.
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.test import override_settings
from rest_framework.test import APIClient

import taskforge.infra.redis
from queues.apikeys import create_key
from queues.dispatch import outage
from queues.models import ApiKey
from queues.telemetry import counters
from taskforge.infra import change_watch, rowcache
from tests.factories import QueueFactory
from workers import registry

pytest_plugins = ["tests.live", "tests.push_receiver"]

#: Tests under this directory touch neither Postgres nor Redis.
UNIT_TESTS = Path(__file__).resolve().parent / "unit"


def redis_url_for_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = "&".join(p for p in parts.query.split("&") if p and not p.startswith("db="))
        return f"unix://{parts.path}?{query}&db={db}".replace("?&", "?")
    return urlunsplit(parts._replace(path=f"/{db}"))


def _worker_number() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw") or 0)


@pytest.fixture(autouse=True)
def isolated_redis(request: pytest.FixtureRequest) -> None:
    """Give every test outside the unit tier its own flushed Redis database.

    The unit tier must run with Redis stopped, so it is not even connected to.
    """
    if not request.path.is_relative_to(UNIT_TESTS):
        request.getfixturevalue("redis_db")


@pytest.fixture
def redis_db(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    base = int(os.environ.get("TASKFORGE_TEST_REDIS_DB_BASE", "1"))
    with redis_at(redis_url_for_db(settings.REDIS_URL, base + _worker_number()), monkeypatch):
        yield


@contextmanager
def redis_at(url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Point every Redis user of this process at ``url``, flushed before and after."""
    monkeypatch.setattr(settings, "REDIS_URL", url)
    monkeypatch.setattr(taskforge.infra.redis, "_client", None)
    # Django's cache (sessions) moves to the same database: override_settings
    # also drops the cache connections opened on the old location. A list: a
    # Sentinel or Cluster URL holds commas, on which django-redis would split a string.
    cache_location = override_settings(CACHES={"default": {**settings.CACHES["default"], "LOCATION": [url]}})
    cache_location.enable()
    client = taskforge.infra.redis.redis_client()
    counters.forget_pending()  # deferred increments of the last test belong to its flushed database
    outage.forget_outage()  # a dead Redis an earlier test pointed at is not this one
    client.flushdb()  # on a Cluster: every primary
    rowcache.clear_all()  # copies tagged with the old generation would outlive the flush
    registry.forget_writes()
    watch = change_watch.current()
    if watch is not None:  # listening from the first request on: copies are not re-read when it starts
        watch.wait_listening(5.0)
    try:
        yield
    finally:
        counters.forget_pending()
        outage.forget_outage()
        client.flushdb()
        rowcache.clear_all()
        registry.forget_writes()
        cache_location.disable()
        taskforge.infra.redis._client = None


@pytest.fixture
def make_key(db: None) -> Callable[[str], str]:
    counter = iter(range(10_000))

    def make(role: str) -> str:
        _, raw = create_key(f"{role}-{next(counter)}", role)
        return raw

    return make


@pytest.fixture
def client_for(make_key: Callable[[str], str]) -> Callable[[str], APIClient]:
    def make(role: str) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_key(role)}")
        return client

    return make


@pytest.fixture
def admin_api(client_for: Callable[[str], APIClient]) -> APIClient:
    return client_for(ApiKey.Role.ADMIN)


@pytest.fixture
def producer(client_for: Callable[[str], APIClient]) -> APIClient:
    return client_for(ApiKey.Role.PRODUCER)


@pytest.fixture
def worker(client_for: Callable[[str], APIClient]) -> APIClient:
    return client_for(ApiKey.Role.WORKER)


@pytest.fixture
def queue(db: None):  # type: ignore[no-untyped-def]
    return QueueFactory(name="email_jobs")


@pytest.fixture
def stdout_log() -> Iterator[Callable[[], list[dict]]]:
    """What the configured stdout handler writes (same formatter, same filters), as parsed JSON lines.

    A copy of the handler, so lines written by any thread are seen (pytest's capture sees only its own streams).
    """
    root = logging.getLogger()
    (configured,) = [handler for handler in root.handlers if handler.get_name() == "stdout"]
    buffer = io.StringIO()
    copy = logging.StreamHandler(buffer)
    copy.setFormatter(configured.formatter)
    for log_filter in configured.filters:
        copy.addFilter(log_filter)
    root.addHandler(copy)
    try:
        yield lambda: [json.loads(line) for line in buffer.getvalue().splitlines() if line.startswith("{")]
    finally:
        root.removeHandler(copy)
