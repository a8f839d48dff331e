"""Fixtures for the Sentinel tests: a real primary, replica and three sentinels per test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

import taskforge.infra.redis
from tests.integration.sentinel.cluster import SentinelCluster


@pytest.fixture
def sentinel_cluster(tmp_path: Path) -> Iterator[SentinelCluster]:
    if shutil.which("redis-server") is None:
        pytest.skip("needs a redis-server binary")
    cluster = SentinelCluster(directory=tmp_path)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def sentinel_redis_url(sentinel_cluster: SentinelCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
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
