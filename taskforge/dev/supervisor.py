"""Keep a set of named child commands running: restart each one that exits, with backoff.

``make run`` (``taskforge.dev.devstack``) runs the API server, the loops and
the demo workers under one ``Supervisor``. A child that exits for any reason
(a crash, ``kill -9``, the OOM killer) is started again after a delay that
doubles with each quick exit (``Backoff``: 0.5 s, 1 s, 2 s ... up to 10 s) and
starts over once a run has lasted ``stable_after`` seconds, so a crashing
command does not spin while a one-off kill is healed at once. Every exit and
restart is logged with the child's name, how it ended and the delay.

Each child runs in its own process group: when a gunicorn master dies, its
orphaned worker processes (which still hold the listening socket) are killed
with it before the master is started again, and ``stop`` reaches every
process of every tree. Children also ask the kernel to SIGTERM them should the
supervisor itself die without cleaning up. Only the standard library and the
launcher are used; the clock and the log are parameters, so the restart logic
runs in unit tests against real short-lived processes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from taskforge.dev import launcher

FIRST_DELAY_SECONDS = 0.5
MAX_DELAY_SECONDS = 10.0
# A run this long counts as healthy: the next exit is restarted after FIRST_DELAY_SECONDS again.
STABLE_AFTER_SECONDS = 30.0


@dataclass
class Backoff:
    """The delays before restarting one child: ``first`` doubling up to ``cap``, reset by a stable run."""

    first: float = FIRST_DELAY_SECONDS
    cap: float = MAX_DELAY_SECONDS
    stable_after: float = STABLE_AFTER_SECONDS
    _next: float | None = None

    def delay_after(self, uptime: float) -> float:
        """The delay before the next start, for a run that lasted ``uptime`` seconds."""
        if self._next is None or uptime >= self.stable_after:
            self._next = self.first
        delay = min(self._next, self.cap)
        self._next = min(delay * 2, self.cap)
        return delay


def describe_exit(returncode: int) -> str:
    """``exit code 3`` or ``killed by SIGKILL`` (Popen reports a signal as its negative number)."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Child:
    """One supervised command, its current process (None while it waits to be restarted) and its history."""

    name: str
    argv: tuple[str, ...]
    env: dict[str, str]
    backoff: Backoff
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    restarts: int = 0
    exits: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int | None:
        """The pid of the running process, None between an exit and its restart."""
        if self.process is None or self.process.poll() is not None:
            return None
        return self.process.pid


class Supervisor:
    """Named child commands, each restarted with its own ``Backoff`` whenever it exits.

    Call ``tick`` regularly (``run`` does, until told to stop); ``stop`` ends
    every child gracefully. ``clock`` is ``time.monotonic`` outside tests.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] = _to_stderr,
        backoff: Callable[[], Backoff] = Backoff,
        die_with_parent: bool = True,
    ) -> None:
        self.clock = clock
        self.log = log
        self.new_backoff = backoff
        # PR_SET_PDEATHSIG is set between fork and exec: only safe while no other thread forks.
        self.die_with_parent = die_with_parent
        self.children: dict[str, Child] = {}

    def add(self, name: str, argv: Sequence[str], env: Mapping[str, str]) -> Child:
        """Start ``argv`` now under ``name``, and keep it running from then on."""
        if name in self.children:
            raise ValueError(f"a child named {name!r} is already supervised")
        child = Child(name, tuple(argv), dict(env), self.new_backoff())
        self.children[name] = child
        self._start(child)
        return child

    def tick(self) -> None:
        """Notice every child that exited since the last tick, and start those whose delay is over."""
        now = self.clock()
        for child in self.children.values():
            if child.process is not None and child.process.poll() is not None:
                self._exited(child, child.process.returncode, now)
            if child.restart_at is not None and now >= child.restart_at:
                child.restarts += 1
                self._start(child)
                if child.process is not None:
                    self.log(f"{child.name} restarted (pid {child.process.pid}, restart {child.restarts})")

    def run(self, stopping: Callable[[], bool], *, interval: float = 0.2) -> None:
        """``tick`` every ``interval`` seconds until ``stopping()`` is true."""
        while not stopping():
            self.tick()
            time.sleep(interval)

    def stop(self, *, grace: float) -> None:
        """SIGTERM every child's process group, SIGKILL what is left after ``grace`` seconds."""
        running = [c.process for c in self.children.values() if c.process is not None]
        launcher.terminate_all(running, grace=grace, group=True)
        for child in self.children.values():
            child.process = None
            child.restart_at = None

    def _start(self, child: Child) -> None:
        child.restart_at = None
        child.started_at = self.clock()
        try:
            child.process = launcher.spawn(child.argv, child.env, own_group=True, die_with_parent=self.die_with_parent)
        except OSError as error:  # e.g. the interpreter vanished: retried like a crash
            child.process = None
            self._schedule_restart(child, f"could not start ({error})", 0.0)

    def _exited(self, child: Child, returncode: int, now: float) -> None:
        assert child.process is not None
        # What the leader leaves behind (a gunicorn master's workers, holding its
        # port) must go before a new copy starts.
        launcher.kill(child.process, group=True)
        child.process = None
        child.exits.append(returncode)
        uptime = now - child.started_at
        self._schedule_restart(child, f"exited ({describe_exit(returncode)}) after {uptime:.1f} s", uptime)

    def _schedule_restart(self, child: Child, what: str, uptime: float) -> None:
        delay = child.backoff.delay_after(uptime)
        child.restart_at = self.clock() + delay
        self.log(f"{child.name} {what}; restarting in {delay:.1f} s")
