"""TaskForge's processes under test, each started, signalled and replaced by process id.

* API: gunicorn masters started exactly as in production (the ASGI app,
  configured by gunicorn.conf.py), each on its own loopback port with its own
  worker processes and Prometheus multiprocess directory.
* Loops: ``manage.py run_scheduler`` / ``run_dispatcher`` / ``run_watchdog``;
  any number of copies.
* Workers: the reference worker (``python -m workers``) with the recording
  handler ``faults.handler:record``, spread over the API servers.

Every command line comes from ``taskforge.dev.launcher``. A process may run
with a skewed wall clock (libfaketime) or with failpoints.
Nothing is ever signalled by name: every fault targets a pid this module
started (or, for gunicorn's worker processes, a child pid of a master it
started).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from faults.handler import EXEC_DIR_ENV
from taskforge.dev import launcher

ROOT = launcher.ROOT
LIBFAKETIME_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
LOOPS = launcher.LOOPS

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
    loop: str = ""  # loop: its management command
    worker_id: str = ""
    api_url: str = ""  # worker: the API it calls

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
        return launcher.child_pids(self.pid)


@dataclass
class Stack:
    run_dir: Path
    database_url: str
    redis_url: str
    secret_key: str
    # Settings every process gets on top of the harness's own (e.g. TASKFORGE_DB_PGBOUNCER).
    settings_env: dict[str, str] = field(default_factory=dict)
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
            **self.settings_env,
        }

    def manage(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            launcher.manage_py(*args),
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

    def _spawn(self, kind: str, name: str, spec: launcher.ProcessSpec, env: dict[str, str], **extra: str) -> Proc:
        """Start ``spec`` in its own session, so a terminal's Ctrl-C reaches only the harness."""
        log = self.run_dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        popen = launcher.spawn(spec.argv, env, log=log, append=True, own_group=True)
        proc = Proc(name=name, kind=kind, popen=popen, log=log, argv=list(spec.argv), env=env, **extra)
        self.procs.append(proc)
        return proc

    def start_api(
        self, *, port: int | None = None, processes: int = 2, extra_env: dict[str, str] | None = None
    ) -> Proc:
        port = port or launcher.free_port()
        name = f"api-{port}-{next(self._numbers)}"
        metrics_dir = self.run_dir / "metrics" / name
        metrics_dir.mkdir(parents=True, exist_ok=True)
        api = launcher.api_server(host="127.0.0.1", port=port, workers=processes, metrics_dir=metrics_dir)
        proc = self._spawn("api", name, api, api.environ(self.base_env(), extra_env), url=f"http://127.0.0.1:{port}")
        self.wait_healthy(proc)
        return proc

    def wait_healthy(self, proc: Proc, timeout: float = 60) -> None:
        def tail() -> str:
            return f"{proc.name}: {proc.log.read_text(errors='replace')[-3000:]}"

        launcher.wait_ready(proc.url, timeout=timeout, process=proc.popen, output=tail)

    def start_loop(self, command: str, *, extra_env: dict[str, str] | None = None, tag: str = "") -> Proc:
        name = f"{command}{tag}-{next(self._numbers)}"
        loop = launcher.loop(command)
        return self._spawn("loop", name, loop, loop.environ(self.base_env(), extra_env), loop=command)

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
        worker = launcher.reference_worker(
            handler="faults.handler:record",
            concurrency=concurrency,
            worker_id=worker_id,
            api_url=url,
            api_key=self.worker_key,
            wait_seconds=2,
            request_timeout=6,
            poll_interval=0.2,
            heartbeat_interval=1,
            grace_seconds=5,
            log_format="json",
        )
        env = worker.environ({**self.base_env(), EXEC_DIR_ENV: str(self.exec_dir)}, extra_env)
        return self._spawn("worker", worker_id, worker, env, worker_id=worker_id, api_url=url)

    @property
    def exec_dir(self) -> Path:
        path = self.run_dir / "executions"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- views

    def apis(self) -> list[Proc]:
        return [p for p in self.procs if p.kind == "api" and p.alive()]

    def loops(self, command: str | None = None) -> list[Proc]:
        return [p for p in self.procs if p.kind == "loop" and p.alive() and command in (None, p.loop)]

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
            return self.start_loop(proc.loop)
        return self.start_worker(api_url=proc.api_url)

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
        return launcher.terminate(proc.popen, grace=timeout)

    def kill(self, proc: Proc) -> None:
        """kill -9 the process and, for a gunicorn master, its worker processes."""
        launcher.kill(proc.popen)

    def stop_all(self) -> None:
        launcher.terminate_all([p.popen for p in self.procs if p.alive()], grace=20)
