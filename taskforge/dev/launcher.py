"""How every TaskForge process is started outside a container, defined once.

``make run`` (``taskforge.dev.devstack``), the live-server tests
(``tests/live.py``), the benchmark (``bench/stack.py``) and the fault suite
(``faults/stack.py``) all build their command lines here, so what they run is
what production runs: the Dockerfile, docker-compose.yml and
deploy/kubernetes/ start the same commands, with ``gunicorn`` and ``python``
taken from the image's PATH instead of an interpreter path.

* ``api_server``: gunicorn serving ``taskforge.asgi`` with the uvicorn worker
  (gunicorn.conf.py reads HOST, PORT and WEB_CONCURRENCY), or, for
  comparison only, ``taskforge.wsgi`` with gunicorn's gthread worker.
* ``loop``: ``manage.py run_scheduler`` / ``run_dispatcher`` / ``run_watchdog`` / ``run_pusher``, or
  ``run_schedules`` (the schedules part of ``run_scheduler``, alone).
* ``reference_worker``: ``python -m taskforge_client.worker`` with its command-line flags.
* ``free_port``, ``free_ports``, ``spawn``, ``wait_ready``, ``terminate``, ``terminate_all``,
  ``kill``: picking a port, starting a process (optionally in its own process
  group), waiting for ``/healthz`` or ``/readyz``, and stopping it with
  SIGTERM, then SIGKILL.

The callers pass every option; nothing here knows about tests, benchmarks or
faults. Only the standard library is imported (no Django), so the benchmark's
own virtualenv can import this module and launch TaskForge with the project's
interpreter (the ``python`` argument).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

ROOT = Path(__file__).resolve().parents[2]
ASGI_APPLICATION = "taskforge.asgi:application"
WSGI_APPLICATION = "taskforge.wsgi:application"
LOOPS = ("run_scheduler", "run_dispatcher", "run_watchdog", "run_pusher")
#: Loops that ``run_scheduler`` already runs, for deployments that want them in processes of their own
#: (``make run`` does not start them).
STANDALONE_LOOPS = ("run_schedules",)
REFERENCE_WORKER_MODULE = "taskforge_client.worker"
Serving = Literal["asgi", "gthread"]
SERVINGS: tuple[Serving, ...] = ("asgi", "gthread")

_PR_SET_PDEATHSIG = 1  # prctl(2)
# How long a process group may take to disappear once SIGKILLed: the kernel
# delivers the signal at once, but a process dies only when it is next scheduled.
_GROUP_EXIT_SECONDS = 5.0


@dataclass(frozen=True)
class ProcessSpec:
    """A command line and the variables it needs on top of the caller's environment."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def environ(self, base: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base``, then this process's variables, then the caller's ``extra`` (which win)."""
        return {**base, **self.env, **(extra or {})}


# --- command lines --------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a server about to be started (the kernel picks it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1", *, exclude: Iterable[int] = ()) -> list[int]:
    """``count`` different free ports (none of ``exclude``), for servers started together.

    Calls of ``free_port`` one after another may return the same port: each
    socket is closed before the next is bound, and the kernel hands the
    number out again. Here every socket stays bound until all are picked.
    """
    taken = set(exclude)
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        while len(ports) < count:
            sock = held.enter_context(socket.socket())
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
            if port not in taken:
                taken.add(port)
                ports.append(port)
        return ports


def manage_py(*args: str, python: str = sys.executable) -> list[str]:
    """``python manage.py ARGS``: migrations, keys, any one-shot management command."""
    return [python, "manage.py", *args]


def api_server(
    *,
    python: str = sys.executable,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
    serving: Serving = "asgi",
    threads: int | None = None,
    metrics_dir: Path | None = None,
) -> ProcessSpec:
    """One gunicorn master and its worker processes, configured by gunicorn.conf.py.

    ``None`` leaves a setting to gunicorn.conf.py's own default (or to the
    caller's environment): HOST 0.0.0.0, PORT 8080, WEB_CONCURRENCY 2.
    ``threads`` is TASKFORGE_THREADS (the ASGI app's sync-view threads) under
    ``asgi`` and gunicorn's ``--threads`` under ``gthread``. ``metrics_dir``
    gives the master its own Prometheus multiprocess directory.
    """
    env: dict[str, str] = {}
    if host is not None:
        env["HOST"] = host
    if port is not None:
        env["PORT"] = str(port)
    if workers is not None:
        env["WEB_CONCURRENCY"] = str(workers)
    if metrics_dir is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    if serving == "asgi":
        argv = [python, "-m", "gunicorn", ASGI_APPLICATION]
        if threads is not None:
            env["TASKFORGE_THREADS"] = str(threads)
    elif serving == "gthread":
        # gunicorn.conf.py still applies; the command line only swaps the app and the worker class.
        argv = [python, "-m", "gunicorn", WSGI_APPLICATION, "-k", "gthread"]
        if threads is not None:
            argv += ["--threads", str(threads)]
    else:
        raise ValueError(f"serving must be one of {', '.join(SERVINGS)}, not {serving!r}")
    return ProcessSpec(tuple(argv), env)


def loop(command: str, *, python: str = sys.executable, once: bool = False) -> ProcessSpec:
    """A background loop (``run_scheduler``, ``run_dispatcher``, ``run_watchdog``, ``run_pusher``, ``run_schedules``).

    The command name stays the argv entry after ``manage.py`` so that a
    caller can tell its loops apart by argv alone.
    """
    if command not in LOOPS + STANDALONE_LOOPS:
        raise ValueError(f"loop must be one of {', '.join(LOOPS + STANDALONE_LOOPS)}, not {command!r}")
    return ProcessSpec(tuple(manage_py(command, *(["--once"] if once else []), python=python)))


def reference_worker(
    *,
    python: str = sys.executable,
    handler: str | None = None,
    queue: str | None = None,
    concurrency: int | None = None,
    worker_id: str | None = None,
    api_url: str | None = None,
    api_key: str | None = None,
    poll_interval: float | None = None,
    heartbeat_interval: float | None = None,
    request_timeout: float | None = None,
    wait_seconds: int | None = None,
    grace_seconds: float | None = None,
    log_format: str | None = None,
    log_level: str | None = None,
    extra_args: Sequence[str] = (),
) -> ProcessSpec:
    """``python -m taskforge_client.worker`` with the flags given; ``None`` leaves a flag to its environment variable.

    The API key never goes on the command line (``ps`` shows argv to every
    user): it travels in TASKFORGE_API_KEY.
    """
    flags: list[tuple[str, object]] = [
        ("--handler", handler),
        ("--queue", queue),
        ("--concurrency", concurrency),
        ("--worker-id", worker_id),
        ("--api-url", api_url),
        ("--poll-interval", poll_interval),
        ("--heartbeat-interval", heartbeat_interval),
        ("--request-timeout", request_timeout),
        ("--wait-seconds", wait_seconds),
        ("--grace-seconds", grace_seconds),
        ("--log-format", log_format),
        ("--log-level", log_level),
    ]
    argv = [python, "-m", REFERENCE_WORKER_MODULE]
    for flag, value in flags:
        if value is not None:
            argv += [flag, str(value)]
    argv += extra_args
    env = {"TASKFORGE_API_KEY": api_key} if api_key is not None else {}
    return ProcessSpec(tuple(argv), env)


# --- starting ----------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """Ask the kernel to SIGTERM this child when its parent dies (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the parent's own cleanup still applies


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    log: Path | None = None,
    append: bool = False,
    own_group: bool = False,
    die_with_parent: bool = False,
    cwd: Path = ROOT,
) -> subprocess.Popen[bytes]:
    """Start a process from the project directory.

    ``log``: stdout and stderr go there (appended to with ``append``), else
    they are inherited. ``own_group``: a new session, so ``terminate`` and
    ``kill`` reach the whole process tree (a gunicorn master's workers, a
    shell's children) and a terminal's Ctrl-C reaches only the caller.
    ``die_with_parent``: the child is SIGTERMed if the caller dies without
    cleaning up (use only when no other thread may fork at the same time).
    """
    out: IO[bytes] | None = log.open("ab" if append else "wb") if log is not None else None
    try:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL if out is not None else None,
            stdout=out,
            stderr=subprocess.STDOUT if out is not None else None,
            start_new_session=own_group,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )
    finally:
        if out is not None:
            out.close()  # the child holds its own copy of the descriptor


# --- waiting for readiness -----------------------------------------------------------------------

# Probes go straight to the server: an http_proxy in the environment must not see loopback URLs.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def answers(url: str, *, timeout: float = 1.0) -> bool:
    """Whether ``url`` answers 200 now (a 503 from /readyz, a refused connection: no)."""
    try:
        with _DIRECT.open(url, timeout=timeout) as response:
            return response.status == 200
    except OSError:  # URLError, HTTPError, timeouts and refused connections are all OSErrors
        return False


def wait_ready(
    base_url: str,
    *,
    path: str = "/healthz",
    timeout: float = 60.0,
    interval: float = 0.1,
    process: subprocess.Popen[bytes] | None = None,
    output: Callable[[], str] = str,
) -> None:
    """Poll ``base_url + path`` until it answers 200.

    Raises ``RuntimeError`` (with ``output()``, e.g. the log's tail) when the
    deadline passes or ``process`` exits first.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server for {base_url} exited with {process.returncode}:\n{output()}")
        if answers(f"{base_url}{path}", timeout=min(2.0, timeout)):
            return
        time.sleep(interval)
    raise RuntimeError(f"{base_url}{path} did not answer 200 within {timeout:.0f} s:\n{output()}")


# --- stopping ------------------------------------------------------------------------------------


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (a gunicorn master's workers), from /proc; [] when unknown."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _signal(process: subprocess.Popen[bytes], signum: int, *, group: bool) -> None:
    try:
        if group:
            os.killpg(process.pid, signum)
        elif process.poll() is None:
            os.kill(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs (zombies, dead but unreaped, do not count)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # After the command name: state, ppid, pgrp (proc(5)).
        state, _, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            return True
    return False


def kill(process: subprocess.Popen[bytes], *, group: bool = False) -> int | None:
    """SIGKILL the process and its children, or its whole group; reap it. Returns its exit code.

    With ``group`` this returns only once no process of the group runs any
    more, so a caller that checks right after finds nothing left.
    """
    if group:
        _signal(process, signal.SIGKILL, group=True)
        deadline = time.monotonic() + _GROUP_EXIT_SECONDS
        while group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    else:
        children = child_pids(process.pid)
        _signal(process, signal.SIGKILL, group=False)
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        return process.wait(10)
    except subprocess.TimeoutExpired:
        return None  # stuck in the kernel (D state): nothing more a signal can do


def _ask_to_stop(process: subprocess.Popen[bytes], *, group: bool) -> None:
    # A stopped (SIGSTOPped) process cannot act on SIGTERM until it is continued.
    _signal(process, signal.SIGCONT, group=group)
    _signal(process, signal.SIGTERM, group=group)


def terminate(process: subprocess.Popen[bytes], *, grace: float, group: bool = False) -> int | None:
    """SIGTERM (the graceful stop every TaskForge process handles), then ``kill`` after ``grace`` seconds.

    ``group`` signals the process's whole group (it must have been started
    with ``own_group``): workers a master leaves behind are stopped too.
    Returns the exit code.
    """
    return terminate_all([process], grace=grace, group=group)[0]


def terminate_all(
    processes: Iterable[subprocess.Popen[bytes]], *, grace: float, group: bool = False
) -> list[int | None]:
    """``terminate`` several processes at once: all are asked first, and share one ``grace`` deadline."""
    processes = list(processes)
    for process in processes:
        if group or process.poll() is None:
            _ask_to_stop(process, group=group)
    deadline = time.monotonic() + grace
    codes: list[int | None] = []
    for process in processes:
        try:
            code: int | None = process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
        # The group may hold grandchildren (gunicorn workers) even when the leader is gone.
        if code is None or group:
            code = kill(process, group=group)
        codes.append(code)
    return codes
