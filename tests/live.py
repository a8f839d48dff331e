"""Real TaskForge processes for multi-process tests.

``LiveStack`` starts API servers and loops as separate OS processes, with the
command lines ``taskforge.dev.launcher`` defines for every launcher (the
production ones), against the test database and this test's Redis database,
and stops them at the end. Tests that use it must use
``django_db(transaction=True)`` so their rows are committed and visible.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from taskforge.dev import launcher

ROOT = launcher.ROOT
STOP_GRACE_SECONDS = 15


# Tests that start servers of their own (a Redis, a stub) pick their ports the launcher's way.
free_port = launcher.free_port


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
        port = launcher.free_port()
        api = launcher.api_server(host="127.0.0.1", port=port, workers=workers)
        process = self._spawn(api.argv, api.environ(self.env, extra_env), f"api-{port}")
        url = f"http://127.0.0.1:{port}"
        launcher.wait_ready(url, timeout=30, process=process, output=self.output)
        self.api_urls.append(url)
        return url

    def start_loop(self, command: str, *, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        loop = launcher.loop(command)
        return self._spawn(loop.argv, loop.environ(self.env, extra_env), command)

    def start(self, argv: list[str], name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self._spawn(argv, {**self.env, **(extra_env or {})}, name)

    def _spawn(self, argv: Sequence[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
        log = self.log_dir / f"{name}-{len(self.processes)}.log"
        self.logs.append(log)
        process = launcher.spawn(argv, env, log=log)
        self.processes.append(process)
        return process

    def output(self) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}" for log in self.logs if log.exists()
        )

    def stop(self) -> None:
        launcher.terminate_all(self.processes, grace=STOP_GRACE_SECONDS)


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
