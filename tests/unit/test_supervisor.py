"""The supervisor behind ``make run``: backoff arithmetic, and restarts of real short-lived processes.

The clock is a counter the test moves, so no test waits for a backoff delay;
the children are real ``sh`` processes (no Postgres, no Redis).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from taskforge.dev.supervisor import Backoff, Supervisor, describe_exit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _wait_exit(supervisor: Supervisor, name: str, timeout: float = 10.0) -> None:
    """Tick until the supervisor has noticed that ``name`` exited."""
    child = supervisor.children[name]
    exits = len(child.exits)
    deadline = time.monotonic() + timeout
    while len(child.exits) == exits:
        assert time.monotonic() < deadline, f"{name} did not exit"
        supervisor.tick()
        time.sleep(0.01)


@pytest.fixture
def supervised():
    clock, lines = Clock(), []
    supervisor = Supervisor(clock=clock, log=lines.append, die_with_parent=False)
    try:
        yield supervisor, clock, lines
    finally:
        supervisor.stop(grace=5)


# --- backoff ---------------------------------------------------------------------------------


def test_delays_double_from_the_first_up_to_the_cap():
    backoff = Backoff(first=0.5, cap=10, stable_after=30)
    assert [backoff.delay_after(uptime=1) for _ in range(8)] == [0.5, 1, 2, 4, 8, 10, 10, 10]


def test_a_run_that_stayed_up_long_enough_starts_the_delays_over():
    backoff = Backoff(first=0.5, cap=10, stable_after=30)
    for _ in range(5):
        backoff.delay_after(uptime=1)
    assert backoff.delay_after(uptime=30) == 0.5
    assert backoff.delay_after(uptime=29.9) == 1


def test_exits_are_described_by_code_or_by_signal():
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(0) == "exit code 0"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(-200) == "killed by signal 200"


# --- restarts ----------------------------------------------------------------------------------


def test_a_killed_child_is_restarted_after_its_delay_and_the_restart_is_logged(supervised):
    supervisor, clock, lines = supervised
    child = supervisor.add("sleeper", ["sleep", "60"], dict(os.environ))
    first = child.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    _wait_exit(supervisor, "sleeper")
    assert child.pid is None
    assert lines[-1].startswith("sleeper exited (killed by SIGKILL) after ")
    assert lines[-1].endswith("; restarting in 0.5 s")

    clock.now += 0.4
    supervisor.tick()
    assert child.pid is None, "restarted before its delay was over"
    clock.now += 0.1
    supervisor.tick()
    assert child.pid not in (None, first)
    assert lines[-1] == f"sleeper restarted (pid {child.pid}, restart 1)"


def test_a_child_that_keeps_crashing_waits_longer_each_time(supervised):
    supervisor, clock, lines = supervised
    supervisor.add("crasher", ["sh", "-c", "exit 3"], dict(os.environ))
    delays = []
    for _ in range(4):
        _wait_exit(supervisor, "crasher")
        delays.append(lines[-1].rsplit(" ", 2)[1])
        clock.now = supervisor.children["crasher"].restart_at
        supervisor.tick()
    assert delays == ["0.5", "1.0", "2.0", "4.0"]
    assert "crasher exited (exit code 3)" in lines[0]
    assert supervisor.children["crasher"].exits == [3, 3, 3, 3]


def test_other_children_keep_running_while_one_is_restarted(supervised):
    supervisor, clock, lines = supervised
    steady = supervisor.add("steady", ["sleep", "60"], dict(os.environ))
    flaky = supervisor.add("flaky", ["sleep", "60"], dict(os.environ))
    steady_pid = steady.pid
    os.kill(flaky.pid, signal.SIGTERM)
    _wait_exit(supervisor, "flaky")
    clock.now += 0.5
    supervisor.tick()
    assert steady.pid == steady_pid
    assert flaky.pid is not None
    assert not any(line.startswith("steady") for line in lines)


def test_what_a_dead_leader_leaves_in_its_group_is_killed_before_the_restart(supervised, tmp_path: Path):
    """A gunicorn master killed with -9 leaves workers on its port: they must go first."""
    supervisor, _, _ = supervised
    pid_file = tmp_path / "orphan.pid"
    child = supervisor.add("tree", ["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], dict(os.environ))
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    orphan = int(pid_file.read_text())
    os.kill(child.pid, signal.SIGKILL)
    _wait_exit(supervisor, "tree")
    state = _state(orphan)
    assert state in (None, "Z"), f"the leader's child {orphan} still runs ({state})"


def test_stop_ends_every_child_and_nothing_is_restarted_afterwards(supervised):
    supervisor, clock, lines = supervised
    children = [supervisor.add(name, ["sleep", "60"], dict(os.environ)) for name in ("a", "b")]
    processes = [child.process for child in children]
    supervisor.stop(grace=5)
    assert [process.returncode for process in processes] == [-signal.SIGTERM, -signal.SIGTERM]
    clock.now += 100
    supervisor.tick()
    assert [child.pid for child in children] == [None, None]
    assert lines == []


def test_a_command_that_cannot_start_is_retried_like_a_crash(supervised):
    supervisor, _, lines = supervised
    child = supervisor.add("missing", ["/nonexistent/command"], dict(os.environ))
    assert child.pid is None
    assert lines[-1].startswith("missing could not start (")
    assert lines[-1].endswith("; restarting in 0.5 s")


def test_two_children_may_not_share_a_name(supervised):
    supervisor, _, _ = supervised
    supervisor.add("one", ["sleep", "60"], dict(os.environ))
    with pytest.raises(ValueError, match="already supervised"):
        supervisor.add("one", ["sleep", "60"], dict(os.environ))


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
