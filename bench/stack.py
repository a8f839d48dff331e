"""TaskForge started the production way, on a dedicated database and Redis DB.

1. ``reset_database`` drops and recreates the bench database (default
   ``taskforge_bench``) on the server of ``DATABASE_URL``; ``migrate`` and
   ``create_api_key`` run with the project's own interpreter.
2. ``start`` runs gunicorn with ``gunicorn.conf.py`` (the ASGI worker) and the
   three loops, with the command lines of ``taskforge.dev.launcher``: exactly
   as ``make run`` and the Docker image do.
3. ``reset_state`` empties the task tables and the bench Redis DB between
   workloads, so each one starts from the same clean slate.

With ``BENCH_DEDICATED_REDIS=1`` the harness first starts a Redis server of its
own on a free port (``start_dedicated_redis``) and points everything at it, so
that its counters (``INFO commandstats``, its CPU time) count nobody else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import redis
from psycopg import sql

from bench.procs import ROOT, Child, Supervisor
from taskforge.dev import launcher

# Time for the API's first /readyz: migrations are done, but a loaded machine starts Django slowly.
READY_TIMEOUT_SECONDS = 60.0
# The harness's own Postgres connections say so, so that bench.meter leaves them out.
HARNESS_APPLICATION = "bench-harness"
REDIS_START_TIMEOUT_SECONDS = 10.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (0 once it is gone)."""
    return sum(user_and_system_seconds(pid))


def user_and_system_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU time of one process ((0, 0) once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    # After the command name: state is field 3, utime and stime are fields 14 and 15 (proc(5)).
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo.extend(int(child) for child in (task / "children").read_text().split())
            except OSError:
                pass
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and everything under it (a worker and its pool processes)."""
    return sum(cpu_seconds(p) for p in descendants(pid))


def database_url_for(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def create_database(server_url: str, name: str) -> None:
    """Database ``name`` on the server of ``server_url``, empty: dropped first if it exists."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(server_url: str, name: str) -> None:
    """Drop database ``name`` on the server of ``server_url``, its sessions ended first."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def redis_url_for_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "db"] + [("db", str(db))]
        return f"unix://{parts.path}?{urlencode(query)}"
    return urlunsplit(parts._replace(path=f"/{db}"))


def dedicated_redis_argv(port: int, directory: Path) -> list[str]:
    """A throw-away Redis: loopback only, no persistence, and noeviction as TaskForge requires."""
    return [
        shutil.which("redis-server") or "redis-server",
        "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--maxmemory-policy", "noeviction", "--dir", str(directory),
    ]  # fmt: skip


def start_dedicated_redis(supervisor: Supervisor) -> tuple[Child, str]:
    """Start ``redis-server`` on a free port under the supervisor; the child and its URL once it answers."""
    if shutil.which("redis-server") is None:
        raise RuntimeError("BENCH_DEDICATED_REDIS=1 needs redis-server on PATH")
    port = launcher.free_port()
    child = supervisor.spawn("redis-server", dedicated_redis_argv(port, supervisor.log_dir), {})
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + REDIS_START_TIMEOUT_SECONDS
    while True:
        try:
            redis.Redis.from_url(url).ping()
            return child, url
        except redis.ConnectionError:
            if not child.alive() or time.monotonic() > deadline:
                supervisor.stop(child, grace=1)
                raise RuntimeError(f"the dedicated redis-server did not start:\n{child.tail()}")
            time.sleep(0.05)


def celery_broker_url(url: str, db: int) -> str:
    """Kombu spells a unix-socket Redis differently from redis-py."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"redis+socket://{parts.path}?virtual_host={db}"
    return urlunsplit(parts._replace(path=f"/{db}"))


@dataclass
class Stack:
    server_database_url: str
    server_redis_url: str
    database_name: str
    redis_db: int
    web_concurrency: int
    pool_size: int
    python: str
    supervisor: Supervisor
    serving: str = "asgi"
    gthread_threads: int = 8
    api_url: str = ""
    api: Child | None = None
    loops: list[Child] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)
    # The Redis server the harness started for itself (BENCH_DEDICATED_REDIS=1), if any.
    redis_server: Child | None = None

    @property
    def database_url(self) -> str:
        return database_url_for(self.server_database_url, self.database_name)

    @property
    def redis_url(self) -> str:
        return redis_url_for_db(self.server_redis_url, self.redis_db)

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            # The bench database is thrown away after the run: its secret guards nothing.
            "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or "bench-only-not-secret",
            "TASKFORGE_DB_POOL_SIZE": str(self.pool_size),
            "WEB_CONCURRENCY": str(self.web_concurrency),
            "PYTHONUNBUFFERED": "1",
            # W9's receiver listens on 127.0.0.1, which the pusher refuses unless told otherwise.
            "TASKFORGE_PUSH_ALLOW_PRIVATE": "true",
        }
        env.update(extra)
        return env

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.database_url, autocommit=True, application_name=HARNESS_APPLICATION)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url)

    # --- setup ---------------------------------------------------------------------

    def reset_database(self) -> None:
        create_database(self.server_database_url, self.database_name)
        self.manage("migrate", "--no-input", "-v", "0")
        for role in ("admin", "producer", "worker"):
            out = self.manage("create_api_key", f"bench-{role}", "--role", role)
            self.keys[role] = out.strip().splitlines()[-1].strip()
        self.redis().flushdb()

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            launcher.manage_py(*args, python=self.python),
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    # --- processes -------------------------------------------------------------------

    def start(self) -> None:
        if self.serving not in launcher.SERVINGS:
            raise ValueError(f"BENCH_SERVING must be asgi or gthread, not {self.serving!r}")
        port = launcher.free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        api = launcher.api_server(
            python=self.python,
            host="127.0.0.1",
            port=port,
            workers=self.web_concurrency,
            serving=cast(launcher.Serving, self.serving),  # checked above
            threads=self.gthread_threads if self.serving == "gthread" else None,
        )
        self.api = self.supervisor.spawn("api", api.argv, api.environ(self.env()))
        for command in launcher.LOOPS:
            loop = launcher.loop(command, python=self.python)
            self.loops.append(self.supervisor.spawn(command, loop.argv, loop.environ(self.env())))
        launcher.wait_ready(
            self.api_url,
            path="/readyz",
            timeout=READY_TIMEOUT_SECONDS,
            interval=0.2,
            process=self.api.process,
            output=self.api.tail,
        )

    def api_worker_pids(self) -> list[int]:
        """The gunicorn worker processes (children of the master)."""
        assert self.api is not None
        children = Path(f"/proc/{self.api.pid}/task/{self.api.pid}/children")
        try:
            return [int(pid) for pid in children.read_text().split()]
        except OSError:
            return []

    def api_cpu_seconds(self) -> float:
        """CPU time (user + system) used so far by the gunicorn workers: a figure noise barely moves."""
        return sum(cpu_seconds(pid) for pid in self.api_worker_pids())

    def check_alive(self) -> None:
        for child in [self.api, *self.loops, self.redis_server]:
            if child is not None and not child.alive():
                raise RuntimeError(f"{child.name} exited:\n{child.tail()}")

    # --- between workloads ---------------------------------------------------------------

    def reset_state(self) -> None:
        """Empty the task tables and the bench Redis DB (queues and keys stay)."""
        with self.connect() as conn:
            conn.execute("TRUNCATE tf_task_event, tf_dead_letter, tf_task, tf_worker")
        # Redis only caches what Postgres holds (DESIGN.md): flushing it is always safe.
        self.redis().flushdb()
