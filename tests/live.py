"""Real TaskForge processes for multi-process tests.

``LiveStack`` starts API servers (gunicorn, the production command line) and
loops as separate OS processes against the test database and this test's
Redis database, and stops them at the end. Tests that use it must use
``django_db(transaction=True)`` so their rows are committed and visible.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_database_url() -> str:
    """The URL of the database pytest-django created for this test session."""
    db = connection.settings_dict
    options = db.get("OPTIONS", {})
    host = db.get("HOST") or options.get("host") or ""
    if host.startswith("/"):
        return f"postgresql://{db['USER']}@/{db['NAME']}?host={host}"
    port = db.get("PORT") or 5432
    return f"postgresql://{db['USER']}@{host}:{port}/{db['NAME']}"


@dataclass
class LiveStack:
    env: dict[str, str]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    api_urls: list[str] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    log_dir: Path = Path(".")

    def start_api(self, *, workers: int = 1, extra_env: dict[str, str] | None = None) -> str:
        """One gunicorn master with ``workers`` processes; returns its base URL."""
        port = free_port()
        env = {**self.env, "PORT": str(port), "HOST": "127.0.0.1", "WEB_CONCURRENCY": str(workers), **(extra_env or {})}
        self._spawn([sys.executable, "-m", "gunicorn", "taskforge.asgi:application"], env, f"api-{port}")
        url = f"http://127.0.0.1:{port}"
        self._wait_healthy(url)
        self.api_urls.append(url)
        return url

    def start_loop(self, command: str, *, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self._spawn([sys.executable, "manage.py", command], {**self.env, **(extra_env or {})}, command)

    def start(self, argv: list[str], name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self._spawn(argv, {**self.env, **(extra_env or {})}, name)

    def _spawn(self, argv: list[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
        log = self.log_dir / f"{name}-{len(self.processes)}.log"
        self.logs.append(log)
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process

    def _wait_healthy(self, url: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"API at {url} did not become healthy:\n{self.output()}")

    def output(self) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}" for log in self.logs if log.exists()
        )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def live_stack(tmp_path: Path) -> Iterator[LiveStack]:
    """Factory for real processes; everything it started is stopped afterwards."""
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_SECRET_KEY": "test-only-not-secret",
        "TASKFORGE_DB_POOL_SIZE": "4",
    }
    stack = LiveStack(env=env, log_dir=tmp_path)
    try:
        yield stack
    finally:
        stack.stop()
