"""Resource exhaustion: Postgres out of disk, Redis out of memory.

Postgres disk-full puts ``tf_task`` in a tablespace on a small tmpfs mount
and fills the mount: every write that needs a new page fails with
``could not extend file`` (SQLSTATE 53100), which TaskForge must answer with
a 503 (the producer retries with its idempotency keys) and never a 500 or a
lost task. Mounting needs root; without it the fault is skipped and says so.

Redis out-of-memory lowers ``maxmemory`` (the harness's Redis runs with
``noeviction``) to just above what is in use: writes to the dispatch tier
are refused, and Postgres, the truth, must carry on alone.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

if TYPE_CHECKING:
    from faults.checker import CheckResult
    from faults.harness import Harness, ScenarioRun

TABLESPACE = "tf_faults_tiny"
MOUNT_MB = 64


class CannotMount(RuntimeError):
    """Mounting a tmpfs needs root (or CAP_SYS_ADMIN)."""


@contextlib.contextmanager
def tiny_tablespace(h: Harness, size_mb: int = MOUNT_MB) -> Iterator[Path]:
    """``tf_task`` on a tablespace over a fresh tmpfs mount of ``size_mb``; yields the mount to fill."""
    # Outside the run directory (mode 0700): the Postgres server's user must reach it.
    mount = Path(tempfile.mkdtemp(prefix="taskforge-tiny-disk-"))
    mount.chmod(0o755)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        mount.rmdir()
        raise CannotMount(done.stderr.decode(errors="replace").strip() or "mount failed")
    try:
        location = mount / "tablespace"
        location.mkdir()
        with psycopg.connect(h.database_url, autocommit=True) as conn:
            data_dir = conn.execute("SHOW data_directory").fetchone()[0]
            owner = os.stat(data_dir)
            os.chown(location, owner.st_uid, owner.st_gid)
            conn.execute(f"CREATE TABLESPACE {TABLESPACE} LOCATION '{location}'")
            conn.execute(f"ALTER TABLE tf_task SET TABLESPACE {TABLESPACE}")
        yield mount
    finally:
        with psycopg.connect(h.database_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE tf_task SET TABLESPACE pg_default")
            conn.execute(f"DROP TABLESPACE IF EXISTS {TABLESPACE}")
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        mount.rmdir()


def fill(mount: Path, name: str = "filler") -> Path:
    """Write zeros into ``mount`` until it is full; the file (``name``) that holds the space."""
    filler = mount / name
    block = b"\0" * (1 << 20)
    with filler.open("wb") as out:
        try:
            while True:
                out.write(block)
                out.flush()
        except OSError:
            pass  # ENOSPC: full
    return filler


def pg_disk_full(h: Harness, run: ScenarioRun) -> None:
    try:
        with tiny_tablespace(h) as mount:
            for round_ in range(2):
                filler = fill(mount)
                run.fault(f"Postgres disk full: tf_task's tablespace has no space left (round {round_ + 1})")
                time.sleep(4)
                filler.unlink()
                run.fault("space freed")
                time.sleep(2)
    except CannotMount as exc:
        run.notes["skipped"] = f"cannot mount a tmpfs for the tablespace: {exc}"


def verify_refusals(h: Harness, run: ScenarioRun, result: CheckResult) -> list[str]:
    """Writes refused while the resource was exhausted were 503s, never 500s."""
    if run.notes.get("skipped") or not run.faults:
        return []
    internal, unavailable = h.api_errors(run.faults[0]["at"])
    problems = [f"{internal} API 500(s) while the resource was exhausted"] if internal else []
    run.notes["api_503s_during_fault"] = unavailable
    return problems


@contextlib.contextmanager
def redis_full(h: Harness, headroom_bytes: int = 64 * 1024) -> Iterator[None]:
    client = h.redis.client()
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used + headroom_bytes)
    try:
        yield
    finally:
        if h.redis.pid is not None:
            client.config_set("maxmemory", 0)


def redis_oom(h: Harness, run: ScenarioRun) -> None:
    for round_ in range(2):
        with redis_full(h):
            run.fault(f"Redis out of memory: maxmemory just above use, noeviction (round {round_ + 1})")
            time.sleep(4)
        run.fault("Redis maxmemory lifted")
        time.sleep(2)
