"""A real PgBouncer in transaction pool mode, in front of the test Postgres.

pytest-django creates the test database on the real server; PgBouncer's
``* = host=... port=...`` entry passes any database name through, so the API
under test reaches that same database by name via PgBouncer.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import connection

from tests.live import free_port

# Debian installs it under /usr/sbin, which is not on every user's PATH.
PGBOUNCER = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")


@dataclass
class PgBouncer:
    port: int
    directory: Path

    def database_url(self) -> str:
        """The test database, reached through PgBouncer."""
        db = connection.settings_dict
        return f"postgresql://{db['USER']}@127.0.0.1:{self.port}/{db['NAME']}"

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def _config(port: int, directory: Path, server_host: str, server_port: int) -> str:
    return f"""[databases]
* = host={server_host} port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = {directory}/userlist.txt
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
max_client_conn = 500
default_pool_size = 20
"""


@pytest.fixture
def pgbouncer() -> Iterator[PgBouncer]:
    if PGBOUNCER is None:
        pytest.skip("needs pgbouncer (apt-get install pgbouncer)")
    db = connection.settings_dict
    # The embedded server of `make test` without DATABASE_URL listens on a Unix socket, named in
    # the URL's ``?host=`` (Django's OPTIONS), not in HOST.
    server_host = db.get("HOST") or db.get("OPTIONS", {}).get("host") or "127.0.0.1"
    if server_host.startswith("/"):
        pytest.skip("PgBouncer here forwards to Postgres over TCP (set DATABASE_URL to a TCP server)")
    port = free_port()
    # Not under pytest's tmp_path: PgBouncer refuses to run as root, and the
    # user it switches to must read its config and write its log.
    directory = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    (directory / "userlist.txt").write_text(f'"{db["USER"]}" ""\n')
    config = directory / "pgbouncer.ini"
    config.write_text(_config(port, directory, server_host, int(db.get("PORT") or 5432)))
    argv = [PGBOUNCER, str(config)]
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres")
        directory.chmod(0o755)
        argv[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    bouncer = PgBouncer(port=port, directory=directory)
    try:
        deadline = time.monotonic() + 10
        while True:
            assert process.poll() is None, f"pgbouncer exited:\n{bouncer.log()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"pgbouncer did not listen:\n{bouncer.log()}"
                time.sleep(0.05)
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)
