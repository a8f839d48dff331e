"""The soak: the whole catalogue of faults, drawn at random, one after another, for minutes.

``FAULTS_SOAK_MINUTES=N make test-faults`` runs this one scenario for N
minutes under the usual producer and worker load, on an embedded Postgres
(so that Postgres restarts are part of the mix). Every fault is one short
action from the catalogue that leaves the stack whole again (a killed
process is replaced, Redis is brought back, a paused worker is continued
after its lease expired); slower faults (a paused worker, a clock-skewed
worker, an API server with failpoints) run beside the others on timers. At
the end the checker judges every task of the soak by the same invariants
as the single scenarios, and the duplicate executions per 10k tasks are
reported.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psycopg

from faults import resources
from faults.scenarios import FAILPOINTS, busy_worker
from faults.services import terminate_backends
from faults.stack import LEASE_SECONDS, LOOPS, Proc, skewed_env

if TYPE_CHECKING:
    from faults.checker import CheckResult
    from faults.harness import Harness, ScenarioRun

#: Seconds between two faults (each fault's own action takes a little more).
PACE_SECONDS = 0.3
#: Seconds the soak leaves at the end for the last faults to heal before the load stops.
TAIL_SECONDS = 8.0
#: The tmpfs under tf_task's tablespace: room for the table to grow through the soak (it is
#: filled only while a disk-full fault lasts).
SOAK_DISK_MB = 512
#: How long a disk-full fault lasts.
DISK_FULL_SECONDS = 3.0


def soak(h: Harness, run: ScenarioRun) -> None:
    deadline = time.monotonic() + run.scenario.load_seconds - TAIL_SECONDS
    faults: list[tuple[Callable[[Harness, ScenarioRun], None], int]] = [
        (worker_kill9, 6),
        (worker_sigterm, 3),
        (worker_stop_cont, 2),
        (loop_kill9, 4),
        (api_process_kill9, 4),
        (api_server_kill9, 1),
        *engine_faults(h),
        (pg_terminate, 4),
        (stale_and_duplicate_calls, 6),
        (garbage_ids, 2),
        (slow_client_flood, 2),
        (skewed_worker, 1),
        (failpoint_server, 1),
    ]
    with contextlib.ExitStack() as stack:
        disk = _tiny_disk(h, run, stack)
        if disk is not None:
            faults.append((pg_disk_full(disk), 1))
        actions, weights = zip(*faults, strict=True)
        rng = random.Random(run.notes.setdefault("seed", random.randrange(1 << 32)))
        run.notes["stale_calls_accepted"] = []
        began = time.monotonic()
        milestones = sorted(engine_milestones(h), key=lambda m: m[0])
        while time.monotonic() < deadline:
            if milestones and time.monotonic() - began >= milestones[0][0] * (deadline - began):
                action = milestones.pop(0)[1]  # a fault the run must include, whatever the draw
            else:
                action = rng.choices(actions, weights)[0]
            try:
                action(h, run)
            except Exception as exc:  # one fault that could not be injected is noted, not the end of the soak
                run.notes.setdefault("injection_errors", []).append(f"{action.__name__}: {exc!r}"[:300])
            time.sleep(PACE_SECONDS)
        for timer in run.notes.pop("timers", []):
            timer.join()


def engine_faults(h: Harness) -> list[tuple[Callable[[Harness, ScenarioRun], None], int]]:
    """The faults of the engines under the stack: one Redis server, or the multi-node topology's."""
    if h.multinode:  # a Redis Cluster or Sentinel, and PgBouncer (faults.multinode)
        return [(redis_failover, 2), (redis_flushall, 1), (redis_pause, 1), (pgbouncer_restart, 2)]
    faults: list[tuple[Callable[[Harness, ScenarioRun], None], int]] = [
        (redis_flushall, 3),
        (redis_pause, 3),
        (redis_down, 1),
        (redis_out_of_memory, 2),
    ]
    if h.postgres.restartable:
        faults.append((pg_restart, 1))
    return faults


def engine_milestones(h: Harness) -> list[tuple[float, Callable[[Harness, ScenarioRun], None]]]:
    """Faults a soak of this topology includes for certain, at these fractions of its length."""
    if h.multinode:  # the Redis primary fails over twice, PgBouncer restarts once, between the draws
        return [(0.3, redis_failover), (0.55, pgbouncer_restart), (0.8, redis_failover)]
    return []


def verify_soak(h: Harness, run: ScenarioRun, result: CheckResult) -> list[str]:
    problems = []
    accepted = run.notes.get("stale_calls_accepted", [])
    if accepted:
        problems.append(f"{len(accepted)} stale or duplicate call(s) were accepted: {accepted[:3]}")
    errors = run.notes.get("injection_errors", [])
    if len(errors) > max(10, len(run.faults) // 20):
        problems.append(f"{len(errors)} faults could not be injected: {errors[:3]}")
    return problems


def _later(run: ScenarioRun, seconds: float, action: Callable[[], None]) -> None:
    timer = threading.Timer(seconds, action)
    timer.daemon = True
    timer.start()
    run.notes.setdefault("timers", []).append(timer)


def plain_apis(h: Harness) -> list[Proc]:
    """The API servers without failpoints (those come and go)."""
    return [p for p in h.stack.apis() if not p.name.endswith("-fp")]


def start_worker(h: Harness, **options: Any) -> Proc:
    """A worker on a plain API server (one with failpoints is stopped a few seconds later), or on the load balancer."""
    return h.stack.start_worker(api_url=h.worker_api_url() or random.choice(plain_apis(h)).url, **options)


# -- processes -----------------------------------------------------------------------------


def worker_kill9(h: Harness, run: ScenarioRun) -> None:
    victim = busy_worker(h, run, timeout=3)
    h.stack.kill(victim)
    run.fault(f"kill -9 worker {victim.worker_id}")
    start_worker(h)


def worker_sigterm(h: Harness, run: ScenarioRun) -> None:
    victim = busy_worker(h, run, timeout=3)
    victim.signal(signal.SIGTERM)
    run.fault(f"SIGTERM worker {victim.worker_id}")
    start_worker(h)  # the drained one exits on its own


def worker_stop_cont(h: Harness, run: ScenarioRun) -> None:
    victim = busy_worker(h, run, timeout=3)
    victim.signal(signal.SIGSTOP)
    run.protected.append(victim)
    run.fault(f"kill -STOP worker {victim.worker_id}")

    def resume() -> None:
        victim.signal(signal.SIGCONT)
        run.protected.remove(victim)

    _later(run, LEASE_SECONDS + 1.5, resume)  # its leases expire meanwhile: its late calls must be refused


def loop_kill9(h: Harness, run: ScenarioRun) -> None:
    command = random.choice(LOOPS)
    running = h.stack.loops(command)
    if not running:
        h.stack.start_loop(command)
        return
    victim = running[0]
    h.stack.kill(victim)
    run.fault(f"kill -9 {command}")
    time.sleep(0.5)
    h.stack.replace(victim)


def api_process_kill9(h: Harness, run: ScenarioRun) -> None:
    master = random.choice(h.stack.apis())
    children = master.children()
    if children:
        signal_pid(random.choice(children), signal.SIGKILL)
        run.fault(f"kill -9 an API worker process of {master.name}")


def api_server_kill9(h: Harness, run: ScenarioRun) -> None:
    apis = plain_apis(h)
    if len(apis) < 2:
        return  # keep one server up: the soak measures faults, not a total outage
    victim = apis[-1]
    h.stack.kill(victim)
    run.fault(f"kill -9 API server {victim.name}")
    h.stack.replace(victim)


def signal_pid(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


# -- Redis ---------------------------------------------------------------------------------


def redis_flushall(h: Harness, run: ScenarioRun) -> None:
    h.redis.flushall()
    run.fault("Redis FLUSHALL")


def redis_pause(h: Harness, run: ScenarioRun) -> None:
    h.redis.client().execute_command("CLIENT", "PAUSE", 1500, "ALL")
    run.fault("Redis CLIENT PAUSE 1.5 s")
    time.sleep(1.5)


def redis_down(h: Harness, run: ScenarioRun) -> None:
    h.redis.shutdown()
    run.fault("Redis shut down")
    time.sleep(2)
    h.redis.start()
    run.fault("Redis started again (empty)")


def redis_failover(h: Harness, run: ScenarioRun) -> None:
    run.fault("kill -9 a Redis primary (its replica is promoted)")
    killed, promoted = h.redis.fail_over()  # type: ignore[attr-defined]  # the multi-node topology's Redis
    run.fault(f"Redis primary now on port {promoted}; the killed one ({killed}) rejoined as its replica")


def redis_out_of_memory(h: Harness, run: ScenarioRun) -> None:
    with resources.redis_full(h):
        run.fault("Redis out of memory (noeviction)")
        time.sleep(2)


# -- Postgres --------------------------------------------------------------------------------


def pg_terminate(h: Harness, run: ScenarioRun) -> None:
    killed = terminate_backends(h.database_url)
    run.fault(f"pg_terminate_backend of {killed} connections")


def pgbouncer_restart(h: Harness, run: ScenarioRun) -> None:
    h.pgbouncer.restart()  # type: ignore[attr-defined]  # the multi-node topology's
    run.fault("kill -9 PgBouncer and start it again")


def pg_restart(h: Harness, run: ScenarioRun) -> None:
    run.fault("Postgres fast restart")
    h.postgres.restart_fast()


def _tiny_disk(h: Harness, run: ScenarioRun, stack: contextlib.ExitStack) -> Path | None:
    """tf_task moved onto a tmpfs for the whole soak (moved back at its end); None without root."""
    try:
        return stack.enter_context(resources.tiny_tablespace(h, size_mb=SOAK_DISK_MB))
    except resources.CannotMount as exc:
        run.notes["disk_full_skipped"] = f"cannot mount a tmpfs for the tablespace: {exc}"
        return None


def pg_disk_full(mount: Path) -> Callable[[Harness, ScenarioRun], None]:
    """The disk-full fault on ``mount``: filled for a few seconds, then freed."""

    def pg_disk_full(h: Harness, run: ScenarioRun) -> None:
        filler = resources.fill(mount, name=f"filler-{uuid.uuid4().hex[:8]}")
        run.fault("Postgres disk full: tf_task's tablespace has no space left")
        try:
            time.sleep(DISK_FULL_SECONDS)
        finally:
            filler.unlink(missing_ok=True)
        run.fault("Postgres disk space freed")

    return pg_disk_full


# -- the worker protocol, misused ------------------------------------------------------------


def stale_and_duplicate_calls(h: Harness, run: ScenarioRun) -> None:
    """Acks, nacks and heartbeats from a lease that is not current: each must be a 409."""
    with psycopg.connect(h.database_url) as conn:
        rows = conn.execute(
            "SELECT t.id, t.claimed_by, t.status FROM tf_task t JOIN tf_queue q ON q.id = t.queue_id "
            "WHERE q.name = %s AND t.status IN ('claimed', 'executing', 'done') ORDER BY random() LIMIT 3",
            [run.queue],
        ).fetchall()
    headers = {"Authorization": f"Bearer {h.stack.worker_key}"}
    url = random.choice(h.api_urls())
    with httpx.Client(base_url=url, headers=headers, timeout=5) as client:
        for task_id, holder, status in rows:
            stranger = f"{holder or 'nobody'}-impostor"
            stale = {"task_id": str(task_id), "lease_token": uuid.uuid4().hex}
            calls = [
                ("/workers/ack", {"worker_id": stranger, **stale}),
                ("/workers/heartbeat", {"worker_id": holder or stranger, **stale}),
                ("/workers/nack", {"worker_id": holder or stranger, **stale, "error": "stale"}),
            ]
            for path, body in calls:
                try:
                    answer = client.post(path, json=body)
                except httpx.HTTPError:
                    continue  # an API process died under it: another fault, not a verdict
                if answer.status_code < 300:
                    run.notes["stale_calls_accepted"].append(f"{path} {status} {task_id}: {answer.status_code}")
    run.fault(f"stale and duplicate acks, nacks and heartbeats for {len(rows)} task(s)")


def garbage_ids(h: Harness, run: ScenarioRun) -> None:
    client = h.redis.client()
    junk = ["not-a-uuid", "", str(uuid.uuid4()), str(uuid.uuid4()).upper()]
    client.zadd(f"tf:{{{run.queue}}}:ready", {member: 0 for member in junk})
    run.fault("garbage ids pushed into the ready lane")


def slow_client_flood(h: Harness, run: ScenarioRun) -> None:
    """Thirty clients trickling form bodies at the admin's login for 3 s."""
    url = random.choice(h.api_urls())
    host, port = url.removeprefix("http://").split(":")
    head = (
        f"POST /admin/login/ HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: 4000\r\nCookie: csrftoken={'a' * 32}\r\n\r\nusername="
    ).encode()
    sockets = []
    for _ in range(30):
        try:
            sock = socket.create_connection((host, int(port)), timeout=2)
            sock.sendall(head)
            sockets.append(sock)
        except OSError:
            break
    run.fault(f"slow-client flood: {len(sockets)} trickling bodies at /admin/login/")

    def close() -> None:
        for sock in sockets:
            sock.close()

    _later(run, 3.0, close)


# -- slower faults, beside the others ----------------------------------------------------------


def skewed_worker(h: Harness, run: ScenarioRun) -> None:
    offset = random.choice(["+1h", "-1h"])
    worker = start_worker(h, extra_env=skewed_env(offset), tag="-skew")
    run.fault(f"a worker with its clock at {offset} joined")
    _later(run, 8.0, lambda: h.stack.stop(worker))


def failpoint_server(h: Harness, run: ScenarioRun) -> None:
    if any("-fp" in p.name for p in h.stack.apis()):
        return
    broken = h.stack.start_api(extra_env={"TASKFORGE_FAILPOINTS": FAILPOINTS})
    broken.name += "-fp"
    run.fault(f"API server {broken.name} with failpoints {FAILPOINTS} joined")
    _later(run, 6.0, lambda: h.stack.stop(broken))
