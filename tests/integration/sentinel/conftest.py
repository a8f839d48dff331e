"""Fixtures for the Sentinel tests: a real primary, replica and three sentinels (``faults.engines``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

import taskforge.infra.redis
from faults.engines import SentinelRedis


def _started(directory: Path) -> Iterator[SentinelRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("needs a redis-server binary")
    cluster = SentinelRedis(directory)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def sentinel_cluster(tmp_path: Path) -> Iterator[SentinelRedis]:
    """Sentinels for this test alone (it may kill the primary)."""
    yield from _started(tmp_path)


@pytest.fixture(scope="session")
def shared_sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelRedis]:
    """One primary, replica and three sentinels for the acceptance tests (they kill nothing)."""
    yield from _started(tmp_path_factory.mktemp("sentinels"))


@pytest.fixture
def sentinel_redis_url(sentinel_cluster: SentinelRedis, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This process's REDIS_URL (clients and Django's cache) pointed at the sentinels."""
    url = sentinel_cluster.url(0)
    monkeypatch.setattr(settings, "REDIS_URL", url)
    monkeypatch.setattr(taskforge.infra.redis, "_client", None)
    cache_location = override_settings(CACHES={"default": {**settings.CACHES["default"], "LOCATION": [url]}})
    cache_location.enable()
    try:
        yield url
    finally:
        cache_location.disable()
        taskforge.infra.redis._client = None
