"""Child processes of the harness, and making sure none outlives it.

Every child starts in its own session (so its whole process tree can be
signalled at once) and, on Linux, asks the kernel to SIGTERM it if the harness
dies without cleaning up (``PR_SET_PDEATHSIG``); ``taskforge.dev.launcher``
does both, and stops a tree with SIGTERM, then SIGKILL once nothing in it may
still run. ``Supervisor.stop_all`` runs from a ``finally`` in
``bench.__main__``, which also turns SIGTERM/SIGHUP into an exception so
Ctrl-C, a kill and a crash all take the same path.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from taskforge.dev import launcher

ROOT = launcher.ROOT
STOP_ALL_GRACE_SECONDS = 15
# How long a SIGKILLed process tree may take to be gone. The kernel delivers
# SIGKILL at once, but a process dies only when it next runs: on a loaded
# machine that can take longer than the launcher's own few seconds of waiting.
GONE_TIMEOUT_SECONDS = 60


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class Supervisor:
    log_dir: Path
    children: list[Child] = field(default_factory=list)

    def spawn(self, name: str, argv: Sequence[str], env: dict[str, str]) -> Child:
        log = self.log_dir / f"{name}.log"
        # No threads are running at spawn time, so the pre-exec PR_SET_PDEATHSIG call is safe.
        process = launcher.spawn(argv, env, log=log, append=True, own_group=True, die_with_parent=True)
        child = Child(name, process, log)
        self.children.append(child)
        return child

    def stop(self, child: Child, grace: float = 10.0) -> None:
        """SIGTERM the child's process group, then SIGKILL whatever is left after ``grace``."""
        launcher.terminate(child.process, grace=grace, group=True)
        wait_until_gone([child.pid])
        if child in self.children:
            self.children.remove(child)

    def stop_all(self) -> None:
        """Stop every child's group (one shared grace period); returns once none of them runs."""
        launcher.terminate_all([c.process for c in self.children], grace=STOP_ALL_GRACE_SECONDS, group=True)
        wait_until_gone([c.pid for c in self.children])
        self.children.clear()


def wait_until_gone(groups: Iterable[int], timeout: float = GONE_TIMEOUT_SECONDS) -> None:
    """SIGKILL and wait until no process of these process groups runs (zombies do not count).

    A process still listed after ``timeout`` (stuck in the kernel) is reported on stderr.
    """
    deadline = time.monotonic() + timeout
    alive = [group for group in groups if launcher.group_alive(group)]
    while alive and time.monotonic() < deadline:
        for group in alive:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass  # gone meanwhile
        time.sleep(0.05)
        alive = [group for group in alive if launcher.group_alive(group)]
    if alive:
        print(f"bench: process groups {alive} still run {timeout:.0f} s after SIGKILL", file=sys.stderr, flush=True)


class Interrupted(BaseException):
    """Raised in the main thread on SIGTERM/SIGHUP so every finally-block runs."""


def raise_on_termination() -> None:
    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)
