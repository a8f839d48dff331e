"""``make run`` under kill -9: its supervisor heals the stack and no task is lost.

``python -m faults.makerun [--workers N] [--rate R] [--database-url URL] [--keep]``

The other scenarios drive a process layout of the harness's own; this one
boots ``python -m taskforge.dev.devstack``, exactly what ``make run`` runs,
against a dedicated database and a private Redis, with ``WORKERS`` demo
workers running the recording handler (``DEMO_HANDLER=faults.handler:record``).
While producers (``faults.load``) enqueue steadily, it SIGKILLs each process
``make run`` supervises in turn: the API's gunicorn master, the scheduler,
the dispatcher, the watchdog and every worker. Each must be back (a new pid)
within 10 s, /healthz must answer within 5 s, and a probe task must then go
from enqueue to done. Once the load stops and the queue drains,
``faults.checker`` checks the usual invariants (nothing lost or stuck, one
terminal transition per task, consistent histories, no overlapping or stale
leases).

``run_make_run`` returns a summary shaped like ``faults.run``'s per scenario,
so the main run can list it with the others.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from faults import checker
from faults.handler import EXEC_DIR_ENV
from faults.harness import scenario_summary
from faults.load import Producer, create_queue, probe
from faults.services import EmbeddedPostgres, MachinePostgres, RedisServer
from faults.stack import LEASE_SECONDS, TIMINGS
from taskforge.dev import launcher

NAME = "make-run-kill9"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/taskforge_faults_makerun"
BOOT_SECONDS = 180  # migrate, collectstatic, ensure_admin and every child, on a busy machine
HEALTHY_AGAIN_SECONDS = 5
BACK_AGAIN_SECONDS = 10
WARMUP_SECONDS = 3.0
SETTLE_TIMEOUT_SECONDS = 60.0
# Each supervised process, in kill order, by a word of its command line (the API: gunicorn's app).
API_MARKER = launcher.ASGI_APPLICATION
WORKER_SETTINGS = {
    "WORKER_CONCURRENCY": "4",
    "WORKER_WAIT_SECONDS": "2",
    "WORKER_REQUEST_TIMEOUT": "6",
    "WORKER_POLL_INTERVAL": "0.2",
    "WORKER_GRACE_SECONDS": "5",
    "WORKER_LOG_FORMAT": "json",
    "HEARTBEAT_INTERVAL": "1",  # a third of the faults' short lease at most
}


@dataclass
class MakeRun:
    """``python -m taskforge.dev.devstack`` in its own process group, its output in ``log``."""

    process: subprocess.Popen[bytes]
    url: str
    home: Path
    log: Path
    exec_dir: Path
    faults: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def admin_key(self) -> str:
        return str(json.loads((self.home / "credentials.json").read_text())["api_key"])

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def child(self, marker: str) -> int | None:
        """The running child of make run whose command line holds ``marker``."""
        for pid in launcher.child_pids(self.process.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in argv and state not in ("Z", "X"):
                return pid
        return None

    def victims(self, workers: int) -> dict[str, str]:
        """Name -> command-line marker of every process make run supervises."""
        loops = {command.removeprefix("run_"): command for command in launcher.LOOPS}
        workers_by_id = {f"demo-worker-{n + 1}": f"demo-worker-{n + 1}" for n in range(workers)}
        return {"api": API_MARKER, **loops, **workers_by_id}


def start_make_run(run_dir: Path, database_url: str, redis_url: str, workers: int) -> MakeRun:
    home, exec_dir = run_dir / "home", run_dir / "executions"
    exec_dir.mkdir(parents=True, exist_ok=True)
    port = launcher.free_port()
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "TASKFORGE_", "PROMETHEUS_", "WORKER_", "QUEUE"))
        and k not in ("DATABASE_URL", "REDIS_URL", "WORKERS", "DEMO_HANDLER", "HEARTBEAT_INTERVAL")
    }
    env = {
        **inherited,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_LOG_LEVEL": "WARNING",
        "TASKFORGE_DB_POOL_SIZE": "4",
        "TASKFORGE_HOME": str(home),
        "PYTHONUNBUFFERED": "1",
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "WEB_CONCURRENCY": "2",
        "WORKERS": str(workers),
        "DEMO_HANDLER": "faults.handler:record",
        EXEC_DIR_ENV: str(exec_dir),
        **TIMINGS,
        **WORKER_SETTINGS,
    }
    log = run_dir / "make-run.log"
    # Its own group: a terminal's Ctrl-C reaches this harness, which then stops make run like Ctrl-C would.
    process = launcher.spawn(
        [sys.executable, "-m", "taskforge.dev.devstack"], env, log=log, own_group=True, die_with_parent=True
    )
    stack = MakeRun(process, f"http://127.0.0.1:{port}", home, log, exec_dir)
    launcher.wait_ready(stack.url, timeout=BOOT_SECONDS, process=process, output=stack.tail)
    return stack


def _healthy_by(url: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if launcher.answers(f"{url}/healthz", timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
            return True
        time.sleep(0.05)
    return False


def kill_and_recover(stack: MakeRun, name: str, marker: str, queue: str, probe_tasks: list[str]) -> None:
    """SIGKILL one supervised process; expect it back, the API answering and fresh work done."""
    old = stack.child(marker)
    if old is None:
        stack.problems.append(f"no running {name} under make run before the kill")
        return
    os.kill(old, signal.SIGKILL)
    killed_at, wall = time.monotonic(), time.time()
    label = f"kill -9 {name} (pid {old})"
    print(f"    fault: {label}", flush=True)
    entry: dict[str, Any] = {"fault": label, "at": wall, "probe_s": None, "back_s": None}
    stack.faults.append(entry)
    if not _healthy_by(stack.url, killed_at + HEALTHY_AGAIN_SECONDS):
        stack.problems.append(f"/healthz did not answer within {HEALTHY_AGAIN_SECONDS} s of {label}")
    while time.monotonic() < killed_at + BACK_AGAIN_SECONDS:
        new = stack.child(marker)
        if new not in (None, old):
            entry["back_s"] = round(time.monotonic() - killed_at, 2)
            break
        time.sleep(0.05)
    else:
        stack.problems.append(f"{name} was not running again within {BACK_AGAIN_SECONDS} s of {label}")
    if stack.process.poll() is not None:
        stack.problems.append(f"make run exited ({stack.process.returncode}) after {label}")
        return
    outcome = probe(lambda: [stack.url], stack.admin_key, queue)
    if outcome is not None:
        probe_tasks.append(outcome[0])
        entry["probe_s"] = None if outcome[1] is None else round(outcome[1], 2)
    if entry["probe_s"] is None:
        stack.problems.append(f"no fresh task was done within 60 s of {label}")


def _unfinished(database_url: str, queue: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM tf_task t JOIN tf_queue q ON q.id = t.queue_id "
            "WHERE q.name = %s AND t.status NOT IN ('done', 'dead', 'cancelled')",
            [queue],
        ).fetchone()
    return int(row[0]) if row else 0


def _settle(database_url: str, queue: str) -> float:
    """Wait for the queue to finish (late calls from stale leases land in between); seconds taken."""
    started = time.monotonic()
    for pause in (1.5, 0.0):
        while _unfinished(database_url, queue) and time.monotonic() - started < SETTLE_TIMEOUT_SECONDS:
            time.sleep(0.25)
        time.sleep(pause)
    return time.monotonic() - started


def _api_errors(log: Path) -> tuple[int, int]:
    """500s (unhandled errors) and 503s (database unavailable) logged by make run's API processes."""
    internal = unavailable = 0
    for raw in log.read_text(errors="replace").splitlines():
        if '"unhandled error"' in raw or '"db.unavailable"' in raw:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            internal += line.get("message") == "unhandled error"
            unavailable += line.get("event") == "db.unavailable"
    return internal, unavailable


def run_make_run(
    run_dir: Path, postgres: MachinePostgres | EmbeddedPostgres, *, workers: int = 3, rate: float = 20.0
) -> dict[str, Any]:
    """Boot make run, kill each of its processes under load, check the queue; a ``faults.run``-style summary."""
    run_dir.mkdir(parents=True, exist_ok=True)
    redis = RedisServer(run_dir)
    queue = f"faults-{NAME}"
    mono_to_wall = time.time() - time.monotonic()
    started = time.monotonic()
    print(f"\n== {NAME}: kill -9 every process make run supervises, one at a time", flush=True)
    postgres.start()
    redis.start()
    stack: MakeRun | None = None
    try:
        stack = start_make_run(run_dir, postgres.url, redis.url, workers)
        create_queue(stack.url, stack.admin_key, queue)
        producer = Producer(apis=lambda: [stack.url], api_key=stack.admin_key, queue=queue, rate=rate)
        producer.start()
        time.sleep(WARMUP_SECONDS)
        probe_tasks: list[str] = []
        for name, marker in stack.victims(workers).items():
            kill_and_recover(stack, name, marker, queue, probe_tasks)
            time.sleep(1.0)
        producer.stop()
        settle = _settle(postgres.url, queue)
        accepted = {a.task_id: a.failing for a in producer.accepted}
        accepted.update({task_id: False for task_id in probe_tasks})
        executions = checker.read_executions(stack.exec_dir, mono_to_wall)
        result = checker.check_queue(postgres.url, queue, accepted, executions, LEASE_SECONDS)
        for entry in stack.faults:
            drain = checker.drain_seconds(postgres.url, queue, entry.pop("at"))
            entry["drain_s"] = None if drain is None else round(drain, 2)
        return scenario_summary(
            NAME,
            "kill -9 each process make run supervises; its supervisor restarts them",
            result,
            stack.problems,
            _api_errors(stack.log),
            producer,
            settle=settle,
            started=started,
            faults=stack.faults,
            notes={"restarts logged": stack.log.read_text(errors="replace").count("restarting in")},
        )
    finally:
        if stack is not None:
            launcher.terminate(stack.process, grace=30, group=True)
        redis.shutdown()
        postgres.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.makerun", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=3, help="demo workers make run starts")
    parser.add_argument("--rate", type=float, default=20.0, help="enqueues per second")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("TASKFORGE_FAULTS_MAKERUN_DATABASE_URL", DEFAULT_DATABASE_URL),
        help="a database this run may drop and recreate (never a shared one)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the run directory (logs) even when all pass")
    args = parser.parse_args(argv)
    run_dir = Path(tempfile.mkdtemp(prefix="taskforge-faults-makerun-"))
    print(f"run directory (logs, execution log, summary): {run_dir}", flush=True)
    summary = run_make_run(run_dir, MachinePostgres(args.database_url), workers=args.workers, rate=args.rate)
    print(json.dumps(summary, indent=2, default=str))
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    if summary["ok"] and not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    print("PASS" if summary["ok"] else f"FAIL (logs in {run_dir})", flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
