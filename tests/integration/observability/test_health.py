"""/healthz and /readyz: in process, and real servers pointed at a dead Redis or Postgres."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis
from django.conf import settings
from django.test import Client

import taskforge.infra.redis
from tests.live import free_port


def _point_redis_at(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setattr(settings, "REDIS_URL", url)
    monkeypatch.setattr(taskforge.infra.redis, "_client", None)


@pytest.mark.django_db
def test_healthz_answers_without_a_key() -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert Client().get("/healthz/").status_code == 200


@pytest.mark.django_db
def test_readyz_when_postgres_and_redis_answer() -> None:
    response = Client().get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"postgres": "ok", "redis": "ok"}}


@pytest.mark.django_db
def test_readyz_names_redis_when_it_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    _point_redis_at(monkeypatch, f"redis://127.0.0.1:{free_port()}/0")
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["error"]["code"] == "unavailable"
    assert "redis" in body["error"]["message"] and "postgres" not in body["error"]["message"]
    assert body["checks"] == {"postgres": "ok", "redis": "down"}
    assert Client().get("/healthz").status_code == 200, "liveness does not depend on Redis"


@pytest.fixture
def evicting_redis() -> Iterator[str]:
    """A private Redis that may evict keys (never the shared one: its settings are not ours to change)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    argv = [binary, "--port", str(port), "--save", "", "--appendonly", "no", "--maxmemory-policy", "allkeys-lru"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(url, socket_timeout=1).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.django_db
def test_readyz_refuses_a_redis_that_evicts_keys(monkeypatch: pytest.MonkeyPatch, evicting_redis: str) -> None:
    _point_redis_at(monkeypatch, evicting_redis)
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert "maxmemory-policy is allkeys-lru" in response.json()["error"]["message"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_live_readyz_names_the_store_that_is_down(live_stack) -> None:  # type: ignore[no-untyped-def]
    closed = free_port()
    without_redis = {"REDIS_URL": f"redis://127.0.0.1:{closed}/0"}
    # No pool: a refused connection then fails the check at once instead of after the pool's timeout.
    without_postgres = {
        "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{closed}/taskforge",
        "TASKFORGE_DB_POOL_SIZE": "0",
    }
    with ThreadPoolExecutor(2) as pool:
        booting = [pool.submit(live_stack.start_api, extra_env=env) for env in (without_redis, without_postgres)]
        redis_down, postgres_down = (future.result() for future in booting)

    for url, down, up in ((redis_down, "redis", "postgres"), (postgres_down, "postgres", "redis")):
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
        response = httpx.get(f"{url}/readyz", timeout=20)
        assert response.status_code == 503, response.text
        body = response.json()
        assert body["error"]["code"] == "unavailable"
        assert body["error"]["message"].startswith(f"not ready: {down}: "), body
        assert body["checks"] == {down: "down", up: "ok"}
