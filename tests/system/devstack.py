"""``make run`` as a user starts it: the real ``python -m taskforge.dev.devstack``.

It runs against the test database and this test's Redis database, in its own
process group, with its home (credentials, logs) under the test's tmp_path.
Tests that use it must use ``django_db(transaction=True)``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

from taskforge.dev import launcher
from tests import live

BOOT_SECONDS = 120  # migrate, collectstatic, ensure_admin and every child, on a busy machine


@dataclass
class DevStack:
    process: subprocess.Popen[bytes]
    url: str
    log: Path
    home: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def credentials(self) -> dict[str, str]:
        """What ``make run`` printed and kept for its user: the admin login and API keys."""
        return json.loads((self.home / "credentials.json").read_text())

    def child(self, marker: str) -> int | None:
        """The pid of ``make run``'s running child whose command line contains ``marker``."""
        for pid in launcher.child_pids(self.process.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() in argv and state(pid) not in (None, "Z", "X"):
                return pid
        return None


def state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@pytest.fixture
def devstack(tmp_path: Path) -> Iterator[DevStack]:
    port = launcher.free_port()
    home = tmp_path / "home"
    env = {
        **os.environ,
        "DATABASE_URL": live.test_database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_SECRET_KEY": "test-only-not-secret",
        "TASKFORGE_HOME": str(home),
        "TASKFORGE_DB_POOL_SIZE": "4",
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "WEB_CONCURRENCY": "1",
        "WORKERS": "0",
    }
    log = tmp_path / "devstack.log"
    # Its own group: the test's SIGTERM reaches make run the way a terminal's Ctrl-C would.
    process = launcher.spawn([sys.executable, "-m", "taskforge.dev.devstack"], env, log=log, own_group=True)
    stack = DevStack(process, f"http://127.0.0.1:{port}", log, home)
    try:
        # Its own API server first: a free port can be taken meanwhile by another test's server, whose
        # /healthz would otherwise pass for this stack's while make run is still migrating.
        deadline = time.monotonic() + BOOT_SECONDS
        while stack.child(launcher.ASGI_APPLICATION) is None:
            assert process.poll() is None, f"make run exited with {process.returncode}:\n{stack.output()}"
            assert time.monotonic() < deadline, f"make run started no API server:\n{stack.output()}"
            time.sleep(0.1)
        launcher.wait_ready(stack.url, timeout=BOOT_SECONDS, process=process, output=stack.output)
        yield stack
    finally:
        launcher.terminate(process, grace=30, group=True)
