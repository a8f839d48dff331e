"""Fixtures for the Cluster tests: one real Cluster (three primaries, three replicas) per test session.

Every test in this directory runs against it: ``redis_db`` (which the root
conftest's autouse fixture asks for) points this process, and the servers a test
starts, at the Cluster instead of the test run's Redis database. The tests that
kill a node start a Cluster of their own (``own_cluster``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskforge.dev.redis_cluster import LocalCluster
from tests.conftest import redis_at


def _started(directory: Path) -> Iterator[LocalCluster]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("needs the redis-server and redis-cli binaries")
    cluster = LocalCluster(directory=directory)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from _started(tmp_path_factory.mktemp("redis-cluster"))


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A Cluster for this test alone (it may kill its nodes)."""
    directory = tmp_path / "own-cluster"
    directory.mkdir()
    yield from _started(directory)


@pytest.fixture
def redis_db(redis_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with redis_at(redis_cluster.url(), monkeypatch):
        yield
