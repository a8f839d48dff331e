"""TaskForge's processes under test, each started, signalled and replaced by process id.

* API: gunicorn masters started exactly as in production
  (``gunicorn taskforge.asgi:application``, configured by gunicorn.conf.py),
  each on its own loopback port with its own worker processes.
* Loops: ``manage.py run_scheduler`` / ``run_dispatcher`` / ``run_watchdog``;
  any number of copies.
* Workers: the reference worker (``python -m workers``) with the recording
  handler ``faults.handler:record``, spread over the API servers.

A process may run with a skewed wall clock (libfaketime) or with failpoints.
Nothing is ever signalled by name: every fault targets a pid this module
started (or, for gunicorn's worker processes, a child pid of a master it
started).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from faults.handler import EXEC_DIR_ENV
from faults.services import free_port

ROOT = Path(__file__).resolve().parent.parent
LIBFAKETIME_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
LOOPS = ("run_scheduler", "run_dispatcher", "run_watchdog")

# Short leases and ticks so that a run fits in minutes; the protocol is the same.
LEASE_SECONDS = 5
TIMINGS = {
    "TASKFORGE_HEARTBEAT_TIMEOUT": str(LEASE_SECONDS),
    "TASKFORGE_WATCHDOG_INTERVAL": "1",
    "TASKFORGE_SCHEDULER_TICK": "1",
}


def libfaketime() -> str | None:
    return next((path for path in LIBFAKETIME_CANDIDATES if Path(path).exists()), None)


def skewed_env(offset: str) -> dict[str, str]:
    """Environment that shifts the wall clock by ``offset`` (e.g. ``+1h``), monotonic time untouched."""
    library = libfaketime()
    if library is None:
        raise RuntimeError("libfaketime is not installed (Debian: apt-get install -y faketime)")
    return {"LD_PRELOAD": library, "FAKETIME": offset, "DONT_FAKE_MONOTONIC": "1"}


@dataclass
class Proc:
    name: str
    kind: str  # api, loop, worker
    popen: subprocess.Popen[bytes]
    log: Path
    argv: list[str]
    env: dict[str, str]
    url: str = ""  # api: base URL
    worker_id: str = ""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            os.kill(self.pid, signum)

    def children(self) -> list[int]:
        """Child pids (a gunicorn master's worker processes), from /proc."""
        try:
            text = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
        except OSError:
            return []
        return [int(pid) for pid in text.split()]


@dataclass
class Stack:
    run_dir: Path
    database_url: str
    redis_url: str
    secret_key: str
    procs: list[Proc] = field(default_factory=list)
    _numbers: itertools.count = field(default_factory=itertools.count)
    admin_key: str = ""
    worker_key: str = ""
    producer_key: str = ""

    # -- environment

    def base_env(self) -> dict[str, str]:
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DJANGO_", "TASKFORGE_", "PROMETHEUS_", "WORKER_", "QUEUE"))
            and k not in ("DATABASE_URL", "REDIS_URL", "LD_PRELOAD", "FAKETIME")
        }
        return {
            **inherited,
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "DJANGO_SECRET_KEY": self.secret_key,
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_LOG_LEVEL": "WARNING",
            "TASKFORGE_DB_POOL_SIZE": "4",
            "PYTHONUNBUFFERED": "1",
            **TIMINGS,
        }

    def manage(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.base_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def prepare(self) -> None:
        """Migrate and create one key per role."""
        self.manage("migrate", "--noinput")
        keys = {}
        for role in ("admin", "producer", "worker"):
            out = self.manage("create_api_key", f"faults-{role}-{os.getpid()}", "--role", role)
            keys[role] = out.strip().splitlines()[-1]
        self.admin_key, self.producer_key, self.worker_key = keys["admin"], keys["producer"], keys["worker"]

    # -- processes

    def _spawn(self, kind: str, name: str, argv: list[str], env: dict[str, str], **extra: str) -> Proc:
        log = self.run_dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        popen = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True
        )
        proc = Proc(name=name, kind=kind, popen=popen, log=log, argv=argv, env=env, **extra)
        self.procs.append(proc)
        return proc

    def start_api(
        self, *, port: int | None = None, processes: int = 2, extra_env: dict[str, str] | None = None
    ) -> Proc:
        port = port or free_port()
        name = f"api-{port}-{next(self._numbers)}"
        metrics_dir = self.run_dir / "metrics" / name
        metrics_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **self.base_env(),
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "WEB_CONCURRENCY": str(processes),
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
            **(extra_env or {}),
        }
        argv = [sys.executable, "-m", "gunicorn", "taskforge.asgi:application"]
        proc = self._spawn("api", name, argv, env, url=f"http://127.0.0.1:{port}")
        self.wait_healthy(proc)
        return proc

    def wait_healthy(self, proc: Proc, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited:\n{proc.log.read_text(errors='replace')[-3000:]}")
            try:
                if httpx.get(f"{proc.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{proc.name} did not become healthy")

    def start_loop(self, command: str, *, extra_env: dict[str, str] | None = None, tag: str = "") -> Proc:
        name = f"{command}{tag}-{next(self._numbers)}"
        env = {**self.base_env(), **(extra_env or {})}
        return self._spawn("loop", name, [sys.executable, "manage.py", command], env)

    def start_worker(
        self,
        *,
        api_url: str | None = None,
        extra_env: dict[str, str] | None = None,
        tag: str = "",
        concurrency: int = 4,
    ) -> Proc:
        number = next(self._numbers)
        worker_id = f"fw{tag}-{number}"
        apis = self.apis()
        url = api_url or apis[number % len(apis)].url
        env = {
            **self.base_env(),
            "TASKFORGE_API_KEY": self.worker_key,
            EXEC_DIR_ENV: str(self.exec_dir),
            **(extra_env or {}),
        }
        argv = [
            sys.executable, "-m", "workers",
            "--handler", "faults.handler:record",
            "--concurrency", str(concurrency),
            "--worker-id", worker_id,
            "--api-url", url,
            "--wait-seconds", "2",
            "--request-timeout", "6",
            "--poll-interval", "0.2",
            "--heartbeat-interval", "1",
            "--grace-seconds", "5",
            "--log-format", "json",
        ]  # fmt: skip
        return self._spawn("worker", worker_id, argv, env, worker_id=worker_id)

    @property
    def exec_dir(self) -> Path:
        path = self.run_dir / "executions"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- views

    def apis(self) -> list[Proc]:
        return [p for p in self.procs if p.kind == "api" and p.alive()]

    def loops(self, command: str | None = None) -> list[Proc]:
        return [p for p in self.procs if p.kind == "loop" and p.alive() and (command is None or command in p.argv)]

    def workers(self) -> list[Proc]:
        return [p for p in self.procs if p.kind == "worker" and p.alive()]

    def by_worker_id(self, worker_id: str) -> Proc | None:
        return next((p for p in self.procs if p.worker_id == worker_id), None)

    # -- lifecycle

    def replace(self, proc: Proc) -> Proc:
        """Start a fresh copy of a dead (or killed) process with the same settings."""
        if proc.kind == "api":
            port = int(proc.url.rsplit(":", 1)[1])
            self._wait_port_free(port)
            extra = {k: v for k, v in proc.env.items() if k == "TASKFORGE_FAILPOINTS"}
            return self.start_api(port=port, processes=int(proc.env["WEB_CONCURRENCY"]), extra_env=extra)
        if proc.kind == "loop":
            return self.start_loop(proc.argv[-1])
        return self.start_worker(api_url=proc.argv[proc.argv.index("--api-url") + 1])

    @staticmethod
    def _wait_port_free(port: int, timeout: float = 30) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind(("127.0.0.1", port))
                    return
                except OSError:
                    time.sleep(0.2)
        raise RuntimeError(f"port {port} stayed busy")

    def stop(self, proc: Proc, timeout: float = 20) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
        proc.signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        proc.signal(signal.SIGTERM)
        try:
            return proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(proc)
            return proc.popen.wait()

    def kill(self, proc: Proc) -> None:
        """kill -9 the process and, for a gunicorn master, its worker processes."""
        children = proc.children()
        proc.signal(signal.SIGKILL)
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            proc.popen.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def stop_all(self) -> None:
        alive = [p for p in self.procs if p.alive()]
        for proc in alive:
            proc.signal(signal.SIGCONT)
            proc.signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in alive:
            try:
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(proc)
