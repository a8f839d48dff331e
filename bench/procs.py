"""Child processes of the harness, and making sure none outlives it.

Every child starts in its own session (so its whole process tree can be
signalled at once) and, on Linux, asks the kernel to SIGTERM it if the harness
dies without cleaning up (``PR_SET_PDEATHSIG``). ``Supervisor.stop_all`` runs
from a ``finally`` in ``bench.__main__``, which also turns SIGTERM/SIGHUP into
an exception so Ctrl-C, a kill and a crash all take the same path.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the finally-block cleanup still applies


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
        with log.open("ab") as out:
            process = subprocess.Popen(
                list(argv),
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # no threads are running at spawn time
            )
        child = Child(name, process, log)
        self.children.append(child)
        return child

    def stop(self, child: Child, grace: float = 10.0) -> None:
        """SIGTERM the child's process group, then SIGKILL whatever is left after ``grace``."""
        _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while child.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        # The group may hold grandchildren (gunicorn workers) even when the leader is gone.
        _signal_group(child, signal.SIGKILL)
        try:
            child.process.wait(5)
        except subprocess.TimeoutExpired:
            pass
        if child in self.children:
            self.children.remove(child)

    def stop_all(self) -> None:
        for child in list(self.children):
            _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while any(c.alive() for c in self.children) and time.monotonic() < deadline:
            time.sleep(0.05)
        for child in list(self.children):
            self.stop(child, grace=0)


def _signal_group(child: Child, signum: int) -> None:
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


class Interrupted(BaseException):
    """Raised in the main thread on SIGTERM/SIGHUP so every finally-block runs."""


def raise_on_termination() -> None:
    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)
