"""One launcher: every way of starting TaskForge outside a container builds its command lines in one module.

``taskforge.dev.launcher`` defines how the API server, the loops and the
reference worker are started; ``make run``, the live-server tests, the
benchmark and the fault suite call it instead of spelling the commands
themselves. No database and no Redis: command lines are compared, source
files read, and a shell's process tree started and stopped.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from taskforge.dev import launcher

ROOT = Path(__file__).resolve().parents[2]

#: The launchers that must take their command lines from ``taskforge.dev.launcher``.
CALLERS = ("taskforge/dev/devstack.py", "tests/live.py", "bench/stack.py", "faults/stack.py")

#: Fragments that spell a TaskForge command line by hand.
HAND_BUILT = (
    '"gunicorn"',
    "uvicorn_worker",
    "taskforge.asgi:application",
    "taskforge.wsgi:application",
    '"manage.py"',
    '"-m", "workers"',
)

#: Fragments of the API server's command line (its worker class lives in gunicorn.conf.py).
API_SERVER_COMMAND = ('"gunicorn"', "taskforge.asgi:application", "taskforge.wsgi:application")

#: Python files that may spell the production commands: the launcher, and the deploy
#: checks, which compare the Dockerfile, docker-compose.yml and Kubernetes manifests with it.
MAY_SPELL_COMMANDS = {"taskforge/dev/launcher.py", "tests/unit/test_launcher.py"}
MAY_SPELL_UNDER = ("tests/system/deploy/",)


def _python_sources() -> list[Path]:
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in tracked if (ROOT / name).exists()]


# --- command lines --------------------------------------------------------------------------


def test_the_api_server_is_gunicorn_with_the_asgi_app_configured_by_its_environment():
    api = launcher.api_server(python="/py", host="127.0.0.1", port=8123, workers=3, metrics_dir=Path("/m"))
    assert api.argv == ("/py", "-m", "gunicorn", "taskforge.asgi:application")
    assert api.env == {"HOST": "127.0.0.1", "PORT": "8123", "WEB_CONCURRENCY": "3", "PROMETHEUS_MULTIPROC_DIR": "/m"}


def test_unset_api_options_are_left_to_gunicorn_conf():
    api = launcher.api_server(python="/py")
    assert api.env == {}


def test_api_threads_are_the_asgi_apps_threads_or_gthreads_threads():
    assert launcher.api_server(python="/py", threads=6).env == {"TASKFORGE_THREADS": "6"}
    gthread = launcher.api_server(python="/py", serving="gthread", threads=8)
    assert gthread.argv == ("/py", "-m", "gunicorn", "taskforge.wsgi:application", "-k", "gthread", "--threads", "8")
    assert gthread.env == {}


def test_an_unknown_serving_mode_is_refused():
    with pytest.raises(ValueError, match="asgi, gthread"):
        launcher.api_server(serving="uwsgi")  # type: ignore[arg-type]


def test_loops_are_management_commands_named_last():
    assert [launcher.loop(name, python="/py").argv for name in launcher.LOOPS] == [
        ("/py", "manage.py", "run_scheduler"),
        ("/py", "manage.py", "run_dispatcher"),
        ("/py", "manage.py", "run_watchdog"),
        ("/py", "manage.py", "run_pusher"),
    ]
    assert launcher.loop("run_watchdog", python="/py", once=True).argv[-1] == "--once"
    assert launcher.loop("run_schedules", python="/py").argv == ("/py", "manage.py", "run_schedules")
    assert "run_schedules" not in launcher.LOOPS  # run_scheduler fires the schedules: make run needs no copy
    with pytest.raises(ValueError, match="run_scheduler"):
        launcher.loop("runserver")


def test_the_reference_worker_gets_only_the_flags_given_and_its_key_in_the_environment():
    worker = launcher.reference_worker(
        python="/py", handler="pkg.mod:fn", worker_id="w-1", wait_seconds=2, poll_interval=0.2, api_key="secret"
    )
    assert worker.argv == (
        "/py", "-m", "taskforge_client.worker", "--handler", "pkg.mod:fn", "--worker-id", "w-1",
        "--poll-interval", "0.2", "--wait-seconds", "2",
    )  # fmt: skip
    assert "secret" not in worker.argv
    assert worker.env == {"TASKFORGE_API_KEY": "secret"}


def test_the_callers_extra_environment_wins_over_the_launchers():
    api = launcher.api_server(port=9000, workers=2)
    env = api.environ({"PORT": "1", "DATABASE_URL": "db"}, {"WEB_CONCURRENCY": "5"})
    assert env == {"PORT": "9000", "DATABASE_URL": "db", "WEB_CONCURRENCY": "5"}


# --- one definition ---------------------------------------------------------------------------


@pytest.mark.parametrize("caller", CALLERS)
def test_each_launcher_takes_its_command_lines_from_taskforge_dev_launcher(caller: str):
    source = (ROOT / caller).read_text()
    assert "launcher.api_server(" in source
    assert "launcher.loop(" in source
    spelled = [fragment for fragment in HAND_BUILT if fragment in source]
    assert spelled == [], f"{caller} spells a command line itself: {spelled}"


def test_no_other_python_file_builds_the_api_server_command():
    offenders = []
    for path in _python_sources():
        name = path.relative_to(ROOT).as_posix()
        if name in MAY_SPELL_COMMANDS or name.startswith(MAY_SPELL_UNDER):
            continue
        text = path.read_text(errors="replace")
        if any(fragment in text for fragment in API_SERVER_COMMAND):
            offenders.append(name)
    assert offenders == [], f"build the API server command with taskforge.dev.launcher.api_server: {offenders}"


def test_the_launcher_and_the_benchmarks_process_modules_import_without_django():
    """The benchmark runs in its own virtualenv, without Django, and launches TaskForge from there."""
    probe = (
        "import sys\n"
        "import taskforge.dev.launcher, bench.procs, bench.stack\n"
        "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "assert not loaded, loaded\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# --- starting and stopping ----------------------------------------------------------------------


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _tree(pid: int, size: int) -> list[int]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        children = launcher.child_pids(pid)
        if len(children) == size - 1:
            return [pid, *children]
        time.sleep(0.02)
    pytest.fail(f"the shell did not start its {size - 1} children")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_terminating_a_group_returns_only_once_nothing_of_it_runs(tmp_path: Path):
    shell = launcher.spawn(
        ["sh", "-c", "sleep 60 & sleep 60 & wait"], dict(os.environ), log=tmp_path / "tree.log", own_group=True
    )
    tree = _tree(shell.pid, 3)
    launcher.terminate(shell, grace=5, group=True)
    assert [pid for pid in tree if _running(pid)] == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path):
    stubborn = launcher.spawn(
        ["sh", "-c", "trap '' TERM; sleep 60 & wait"], dict(os.environ), log=tmp_path / "s.log", own_group=True
    )
    tree = _tree(stubborn.pid, 2)
    started = time.monotonic()
    code = launcher.terminate(stubborn, grace=0.5, group=True)
    assert code == -9
    assert time.monotonic() - started < 5
    assert [pid for pid in tree if _running(pid)] == []


def test_waiting_for_a_server_that_exited_fails_at_once_with_its_output(tmp_path: Path):
    log = tmp_path / "api.log"
    process = launcher.spawn(["sh", "-c", "echo cannot bind; exit 3"], dict(os.environ), log=log)
    process.wait(5)
    with pytest.raises(RuntimeError, match="exited with 3:\ncannot bind"):
        launcher.wait_ready("http://127.0.0.1:9", timeout=30, process=process, output=log.read_text)


def test_ports_picked_together_are_distinct_free_and_avoid_the_excluded():
    # free_port() twice in a row may return the same port; a Sentinel fixture once started two nodes on one.
    first = launcher.free_ports(20)
    assert len(set(first)) == 20
    more = launcher.free_ports(20, exclude=first)
    assert not set(more) & set(first)
    for port in first + more:  # nothing holds them once picked: each can be bound
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
