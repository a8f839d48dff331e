"""A live TaskForge (API + loops, short leases) and reference-worker processes to point at it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from queues.apikeys import create_key
from taskforge_client import TaskForgeClient
from tests.live import LiveStack

# Short enough for quick tests, long enough that a loaded 2-core CI machine
# still serves a heartbeat (sent every 0.5 s) before the lease runs out.
LEASE_SECONDS = 3
# Shared by the API (lease length) and the watchdog (expiry sweep).
SHORT_LEASES = {"TASKFORGE_HEARTBEAT_TIMEOUT": str(LEASE_SECONDS), "TASKFORGE_WATCHDOG_INTERVAL": "1"}

WORKER_MODULE = "taskforge_client.worker"
# Runs ``python -m taskforge_client.worker ARGS`` with every Django import (and the
# server's packages) refused: the worker, its client and the test handlers need
# nothing but the standard library and httpx. (That the installed wheel runs in a
# virtualenv without Django is tests/system/test_client_package.py.)
WITHOUT_DJANGO = """
import runpy, sys

class RefuseDjango:
    BLOCKED = ("django", "rest_framework", "taskforge", "queues", "workers", "dashboard")

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.BLOCKED:
            raise ImportError(f"{name} imported, but the worker must run without Django")
        return None

sys.meta_path.insert(0, RefuseDjango())
sys.argv = ["taskforge_client.worker", *sys.argv[1:]]
runpy.run_module("taskforge_client.worker", run_name="__main__", alter_sys=True)
"""


def wait_for(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path
    worker_id: str

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("event") == name]

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)


@dataclass
class TaskForge:
    stack: LiveStack
    url: str
    keys: dict[str, str]
    clients: list[TaskForgeClient] = field(default_factory=list)

    def client(self, role: str = "admin", **options: Any) -> TaskForgeClient:
        client = TaskForgeClient(self.url, self.keys[role], **options)
        self.clients.append(client)
        return client

    def start_worker(
        self,
        *args: str,
        worker_id: str,
        handler: str | None = "tests.integration.workers.handlers:handle",
        django: bool = False,
        env: dict[str, str] | None = None,
    ) -> Worker:
        argv = ["--worker-id", worker_id, "--wait-seconds", "1", "--poll-interval", "0.2", *args]
        if handler:
            argv = ["--handler", handler, *argv]
        extra = {
            "TASKFORGE_API_URL": self.url,
            "TASKFORGE_API_KEY": self.keys["worker"],
            "HEARTBEAT_INTERVAL": "0.5",
            "DJANGO_SETTINGS_MODULE": "",
            **(env or {}),
        }
        command = [sys.executable, "-m", WORKER_MODULE] if django else [sys.executable, "-c", WITHOUT_DJANGO]
        process = self.stack.start([*command, *argv], f"worker-{worker_id}", extra)
        return Worker(process, self.stack.logs[-1], worker_id)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "loops(*commands): background loops (run_scheduler, run_watchdog) the taskforge fixture starts"
    )


@pytest.fixture
def taskforge(live_stack: LiveStack, request: pytest.FixtureRequest) -> Iterator[TaskForge]:
    """An API with short (LEASE_SECONDS) leases, plus the loops the test's ``loops`` mark names.

    Only the loops a test needs are started, and the test begins once they
    run: on a busy 2-core machine a starting Django process takes seconds of
    CPU that a 3-second lease cannot spare.
    """
    keys = {role: create_key(f"{role}-live", role)[1] for role in ("admin", "producer", "worker")}
    marker = request.node.get_closest_marker("loops")
    logs = []
    for command in marker.args if marker else ():
        live_stack.start_loop(command, extra_env=SHORT_LEASES)
        logs.append(live_stack.logs[-1])
    url = live_stack.start_api(extra_env=SHORT_LEASES)
    for log in logs:
        wait_for(lambda log=log: log.exists() and "loop.start" in log.read_text(), 60, what=f"{log.name} running")
    forge = TaskForge(live_stack, url, keys)
    yield forge
    for client in forge.clients:
        client.close()


def transitions(task: dict[str, Any]) -> list[tuple[str | None, str, str | None]]:
    return [(h["from_status"], h["to_status"], h["worker_id"]) for h in task["history"]]
