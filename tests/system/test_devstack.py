"""``make run`` survives the death of any one of its processes.

The real ``python -m taskforge.dev.devstack`` runs against the test database
and this test's Redis database; the test kills its gunicorn master and its
dispatcher with SIGKILL and expects the stack to heal itself: /healthz
answers again within 5 s, a new process (new pid, running) is back within
10 s, ``make run`` itself is still up, and a task can still be enqueued and
claimed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from queues.apikeys import create_key
from taskforge.dev import launcher
from tests import live

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BOOT_SECONDS = 120  # migrate, collectstatic, ensure_admin and every child, on a busy machine
HEALTHY_AGAIN_SECONDS = 5
BACK_AGAIN_SECONDS = 10


@dataclass
class DevStack:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def child(self, marker: str) -> int | None:
        """The pid of ``make run``'s running child whose command line contains ``marker``."""
        for pid in launcher.child_pids(self.process.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() in argv and _state(pid) not in (None, "Z", "X"):
                return pid
        return None


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@pytest.fixture
def devstack(tmp_path: Path) -> Iterator[DevStack]:
    port = launcher.free_port()
    env = {
        **os.environ,
        "DATABASE_URL": live.test_database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_SECRET_KEY": "test-only-not-secret",
        "TASKFORGE_HOME": str(tmp_path / "home"),
        "TASKFORGE_DB_POOL_SIZE": "4",
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "WEB_CONCURRENCY": "1",
        "WORKERS": "0",
    }
    log = tmp_path / "devstack.log"
    # Its own group: the test's SIGTERM reaches make run the way a terminal's Ctrl-C would.
    process = launcher.spawn([sys.executable, "-m", "taskforge.dev.devstack"], env, log=log, own_group=True)
    stack = DevStack(process, f"http://127.0.0.1:{port}", log)
    try:
        launcher.wait_ready(stack.url, timeout=BOOT_SECONDS, process=process, output=stack.output)
        yield stack
    finally:
        launcher.terminate(process, grace=30, group=True)


def _healthy_by(url: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if launcher.answers(f"{url}/healthz", timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
            return True
        time.sleep(0.05)
    return False


def _replaced_by(stack: DevStack, marker: str, old_pid: int, deadline: float) -> int | None:
    while time.monotonic() < deadline:
        pid = stack.child(marker)
        if pid not in (None, old_pid):
            return pid
        time.sleep(0.05)
    return None


def _kill_and_expect_recovery(stack: DevStack, marker: str) -> None:
    old_pid = stack.child(marker)
    assert old_pid is not None, f"no {marker} process under make run:\n{stack.output()}"
    os.kill(old_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    new_pid = _replaced_by(stack, marker, old_pid, killed_at + BACK_AGAIN_SECONDS)
    assert new_pid is not None, f"{marker} was not restarted within {BACK_AGAIN_SECONDS} s:\n{stack.output()}"
    assert _healthy_by(stack.url, killed_at + HEALTHY_AGAIN_SECONDS), (
        f"/healthz did not answer within {HEALTHY_AGAIN_SECONDS} s of killing {marker}:\n{stack.output()}"
    )
    assert stack.process.poll() is None, f"make run exited with {stack.process.returncode}:\n{stack.output()}"
    assert _state(new_pid) not in (None, "Z", "X"), f"the new {marker} ({new_pid}) is not running"


def test_a_killed_api_server_and_dispatcher_come_back_and_the_stack_still_works(devstack: DevStack) -> None:
    _kill_and_expect_recovery(devstack, launcher.ASGI_APPLICATION)  # the gunicorn master
    _kill_and_expect_recovery(devstack, "run_dispatcher")
    log = devstack.output()
    assert "api exited (killed by SIGKILL)" in log
    assert "dispatcher exited (killed by SIGKILL)" in log

    _, key = create_key("devstack-test", "admin")
    queue = f"devstack_{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=devstack.url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as http:
        assert http.post("/queues", json={"name": queue}).status_code == 201
        created = http.post(f"/queues/{queue}/tasks", json={"payload": {"n": 1}})
        assert created.status_code == 201, created.text
        claimed = http.post("/workers/claim", json={"worker_id": "devstack-test", "queue": queue, "wait_seconds": 10})
        assert claimed.status_code == 200, claimed.text
        assert [task["id"] for task in claimed.json()["tasks"]] == [created.json()["id"]]
