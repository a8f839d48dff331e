"""The faults, one scenario each, injected while the steady load runs.

A scenario's ``inject`` runs after a short warm-up and records every fault
with ``run.fault(label)`` (its time starts a recovery probe); its optional
``verify`` adds checks of its own to the checker's. Every process is
targeted by pid; everything a scenario breaks is healed before the checker
runs (``Harness.heal``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from faults import checker, resources
from faults.services import terminate_backends
from faults.stack import LEASE_SECONDS, LOOPS, Proc, skewed_env

if TYPE_CHECKING:
    from faults.checker import CheckResult
    from faults.harness import Harness, ScenarioRun

FAILPOINTS = "claim.after_commit=5%kill,ack.after_commit=5%kill,enqueue.after_commit=5%kill"


@dataclass
class Scenario:
    name: str
    description: str
    inject: Callable[[Harness, ScenarioRun], None]
    load_seconds: float = 10.0
    verify: Callable[[Harness, ScenarioRun, CheckResult], list[str]] | None = None
    restartable_postgres: bool = False
    notes: dict[str, Any] = field(default_factory=dict)
    #: The queue is a push queue delivering to the harness's receiver (``faults.receiver``), with
    #: no planned failures: every task must end done, and deliveries stand for executions.
    push: bool = False


# -- helpers ---------------------------------------------------------------------------


def busy_worker(h: Harness, run: ScenarioRun, timeout: float = 10.0) -> Proc:
    """A live worker (a pusher, for a push queue) that holds at least one task of this scenario's
    queue right now."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with psycopg.connect(h.database_url) as conn:
            holders = [
                row[0]
                for row in conn.execute(
                    "SELECT t.claimed_by FROM tf_task t JOIN tf_queue q ON q.id = t.queue_id "
                    "WHERE q.name = %s AND t.status IN ('claimed', 'executing') GROUP BY 1 ORDER BY count(*) DESC",
                    [run.queue],
                )
            ]
        for worker_id in holders:
            proc = h.stack.by_worker_id(worker_id)
            if proc is not None and proc.alive() and proc not in run.protected:
                return proc
        time.sleep(0.1)
    raise RuntimeError("no worker held a task within 10 s: is the load flowing?")


def held_by(h: Harness, worker_id: str) -> list[str]:
    with psycopg.connect(h.database_url) as conn:
        return [
            str(row[0])
            for row in conn.execute(
                "SELECT id FROM tf_task WHERE claimed_by = %s AND status IN ('claimed', 'executing')", [worker_id]
            )
        ]


def done_by(h: Harness, worker_ids: list[str]) -> dict[str, int]:
    """How many tasks each worker took to ``done``, from the history in Postgres (worker logs are
    quiet at INFO: a task's own lines are DEBUG)."""
    with psycopg.connect(h.database_url) as conn:
        counts = dict(
            conn.execute(
                "SELECT worker_id, count(*) FROM tf_task_event "
                "WHERE kind = 'transition' AND to_status = 'done' AND worker_id = ANY(%s) GROUP BY 1",
                [worker_ids],
            ).fetchall()
        )
    return {worker_id: counts.get(worker_id, 0) for worker_id in worker_ids}


def log_events(proc: Proc, since_wall: float = 0.0) -> list[dict[str, Any]]:
    """The reference worker's JSON log lines (optionally only those after a wall time)."""
    from datetime import datetime

    lines = []
    for raw in proc.log.read_text(errors="replace").splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(line, dict):
            continue
        stamp = line.get("time")
        if since_wall and stamp and datetime.fromisoformat(stamp).timestamp() < since_wall:
            continue
        lines.append(line)
    return lines


# -- workers ------------------------------------------------------------------------------


def worker_kill9(h: Harness, run: ScenarioRun) -> None:
    for _ in range(2):
        victim = busy_worker(h, run)
        tasks = held_by(h, victim.worker_id)
        h.stack.kill(victim)
        run.fault(f"kill -9 worker {victim.worker_id} (pid {victim.pid}) holding {len(tasks)} task(s)")
        run.notes.setdefault("orphaned", []).extend(tasks)
        h.stack.start_worker()
        time.sleep(3)


def verify_worker_kill9(h: Harness, run: ScenarioRun, result: CheckResult) -> list[str]:
    # Each orphaned task was reclaimed by lease expiry and then finished by someone else.
    if result.lease_expiries < 1:
        return ["killed workers held tasks, yet no lease expired"]
    return []


def worker_stop_cont(h: Harness, run: ScenarioRun) -> None:
    for _ in range(5):
        victim = busy_worker(h, run)
        victim.signal(signal.SIGSTOP)
        time.sleep(0.5)  # a call sent just before the stop may still land: count what it holds after that
        tasks = held_by(h, victim.worker_id)
        if tasks:
            break
        victim.signal(signal.SIGCONT)  # it finished everything in time: try another moment
    run.protected.append(victim)  # heal() must not restart it: it is only paused
    run.fault(f"kill -STOP worker {victim.worker_id} (pid {victim.pid}) holding {len(tasks)} task(s)")
    time.sleep(LEASE_SECONDS + 2.5)  # longer than the lease: the watchdog hands its tasks to others
    victim.signal(signal.SIGCONT)
    run.notes["continued_at"] = time.time()
    run.notes["paused_worker"] = victim.worker_id
    run.notes["paused_tasks"] = tasks
    run.fault(f"kill -CONT worker {victim.worker_id}")
    time.sleep(4)


def verify_worker_stop_cont(h: Harness, run: ScenarioRun, result: CheckResult) -> list[str]:
    problems = []
    proc = h.stack.by_worker_id(run.notes["paused_worker"])
    assert proc is not None
    refused = [
        line
        for line in log_events(proc, since_wall=run.notes["continued_at"] - 1)
        if line.get("event") == "task.lease_lost" and line.get("task_id") in run.notes["paused_tasks"]
    ]
    run.notes["late_calls_refused_409"] = len(refused)
    if not refused:
        problems.append("the paused worker's late heartbeat/ack was not refused with lease_lost (409)")
    with psycopg.connect(h.database_url) as conn:
        # Done by the paused worker is fine only under a lease it was granted after it resumed.
        stale_done = conn.execute(
            "SELECT count(*) FROM tf_task t WHERE t.id = ANY(%s::uuid[]) AND t.status = 'done' AND t.claimed_by = %s "
            "AND (SELECT max(e.at) FROM tf_task_event e WHERE e.task_id = t.id AND e.to_status = 'claimed') "
            "< to_timestamp(%s)",
            [run.notes["paused_tasks"], run.notes["paused_worker"], run.notes["continued_at"]],
        ).fetchone()[0]
    if stale_done:
        problems.append(f"{stale_done} task(s) held at the pause were completed under the paused worker's old lease")
    if not proc.alive():
        problems.append("the paused worker died after SIGCONT")
    return problems


def worker_sigterm(h: Harness, run: ScenarioRun) -> None:
    victim = busy_worker(h, run)
    run.notes["drained_worker"] = victim.worker_id
    run.notes["held_at_sigterm"] = held_by(h, victim.worker_id)
    victim.signal(signal.SIGTERM)
    run.fault(f"SIGTERM worker {victim.worker_id} (pid {victim.pid})")
    started = time.monotonic()
    try:
        run.notes["exit_code"] = victim.popen.wait(30)
    except subprocess.TimeoutExpired:
        run.notes["exit_code"] = None  # verify reports it
    run.notes["drain_seconds"] = round(time.monotonic() - started, 2)
    h.stack.start_worker()


def verify_worker_sigterm(h: Harness, run: ScenarioRun, result: CheckResult) -> list[str]:
    problems = []
    if run.notes.get("exit_code") != 0:
        problems.append(f"worker did not exit 0 after SIGTERM (exit code {run.notes.get('exit_code')})")
    with psycopg.connect(h.database_url) as conn:
        expired = conn.execute(
            "SELECT count(*) FROM tf_task_event WHERE task_id = ANY(%s::uuid[]) AND worker_id IS NULL "
            "AND from_status IN ('claimed', 'executing') AND to_status IN ('retry', 'dead')",
            [run.notes["held_at_sigterm"]],
        ).fetchone()[0]
    if expired:
        problems.append(f"{expired} task(s) of the drained worker waited for lease expiry (graceful drain failed)")
    return problems


# -- loops -------------------------------------------------------------------------------


def loop_kill9(h: Harness, run: ScenarioRun) -> None:
    for command in LOOPS:
        (victim,) = h.stack.loops(command)[:1]
        h.stack.kill(victim)
        run.fault(f"kill -9 {command} (pid {victim.pid})")
        if command == "run_watchdog":
            # While no watchdog runs, an orphaned lease cannot be reclaimed: make one.
            worker = busy_worker(h, run)
            h.stack.kill(worker)
            run.fault(f"kill -9 worker {worker.worker_id} while the watchdog is down")
            h.stack.start_worker()
            time.sleep(LEASE_SECONDS + 1)
        else:
            time.sleep(2)
        h.stack.replace(victim)


def loops_doubled(h: Harness, run: ScenarioRun) -> None:
    extra = [h.stack.start_loop(command, tag="-copy") for command in LOOPS]
    run.fault("second copy of scheduler, dispatcher and watchdog started")
    time.sleep(2)
    worker = busy_worker(h, run)
    h.stack.kill(worker)  # two watchdogs now race for the same expired leases
    run.fault(f"kill -9 worker {worker.worker_id} (two watchdogs race for its leases)")
    h.stack.start_worker()
    time.sleep(LEASE_SECONDS + 2)
    for proc in extra:
        h.stack.stop(proc)


# -- pushers -------------------------------------------------------------------------------

#: Kills of a pusher, each while it holds deliveries in flight.
PUSHER_KILLS = 2


def wait_delivering(h: Harness, run: ScenarioRun, pusher: Proc, timeout: float = 60.0) -> None:
    """Until ``pusher`` has claimed a task of the scenario's queue (a loop takes seconds to boot)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with psycopg.connect(h.database_url) as conn:
            if conn.execute(
                "SELECT 1 FROM tf_task_event e JOIN tf_queue q ON q.id = e.queue_id "
                "WHERE q.name = %s AND e.worker_id = %s AND e.to_status = 'claimed' LIMIT 1",
                [run.queue, pusher.worker_id],
            ).fetchone():
                return
        time.sleep(0.2)
    raise RuntimeError(f"pusher {pusher.worker_id} claimed nothing within {timeout:.0f} s")


def pusher_kill9(h: Harness, run: ScenarioRun) -> None:
    # Two pushers share the queue: the survivor keeps delivering while the victim's leases lapse.
    second = h.stack.start_loop("run_pusher", tag="-second")
    for pusher in h.stack.pushers():
        wait_delivering(h, run, pusher)
    for _ in range(PUSHER_KILLS):
        victim = busy_worker(h, run)
        h.stack.kill(victim)
        # Read after the kill, so exactly what it held: claimed, maybe sent, not yet acked.
        in_flight = held_by(h, victim.worker_id)
        run.fault(f"kill -9 pusher {victim.worker_id} (pid {victim.pid}) with {len(in_flight)} delivery(ies) in flight")
        run.notes.setdefault("in_flight_at_kill", []).append(in_flight)
        h.stack.replace(victim)
        time.sleep(LEASE_SECONDS + 1)  # its leases lapse, and those tasks are delivered again
    h.stack.stop(second)  # SIGTERM: its deliveries in flight finish and are recorded


def verify_pusher_kill9(h: Harness, run: ScenarioRun, result: CheckResult) -> list[str]:
    """Deliveries the receiver saw more than once are only those in flight at a kill, each once
    more per kill that caught it in flight."""
    problems = []
    caught: dict[str, int] = {}
    for in_flight in run.notes["in_flight_at_kill"]:
        for task_id in in_flight:
            caught[task_id] = caught.get(task_id, 0) + 1
    with psycopg.connect(h.database_url) as conn:
        rows = conn.execute(
            "SELECT t.id FROM tf_task t JOIN tf_queue q ON q.id = t.queue_id WHERE q.name = %s", [run.queue]
        )
        ids = [str(row[0]) for row in rows]
    deliveries = checker.read_deliveries(h.stack.deliveries_log, h.mono_to_wall)
    twice = {task_id: len(deliveries[task_id]) for task_id in ids if len(deliveries.get(task_id, [])) > 1}
    unexplained = {task_id: n for task_id, n in twice.items() if n > 1 + caught.get(task_id, 0)}
    if unexplained:
        problems.append(f"{len(unexplained)} task(s) delivered again without a kill catching them in flight: "
                        f"{dict(list(unexplained.items())[:5])}")  # fmt: skip
    if not caught:
        problems.append("no kill caught a delivery in flight")
    if result.lease_expiries < len(caught):
        problems.append(f"{len(caught)} task(s) in flight at a kill, yet only {result.lease_expiries} lease(s) expired")
    again = sum(n - 1 for n in twice.values())
    run.notes["in_flight_at_kill_total"] = sum(caught.values())
    run.notes["delivered_twice"] = again
    # In flight but not seen twice: claimed, and killed before its request reached the receiver.
    both = sum(1 for n in caught.values() if n > 1)
    run.report.append(
        f"pusher kills: {sum(caught.values())} delivery(ies) in flight at the kills; {again} delivered twice "
        f"({len(twice)} task(s){f', {both} of them in flight at both kills' if both else ''}), "
        f"{'all' if not unexplained else 'NOT all'} in flight at a kill; {len(ids) - len(twice)} task(s) delivered once"
    )
    return problems


# -- API -----------------------------------------------------------------------------------


def api_kill9(h: Harness, run: ScenarioRun) -> None:
    for _ in range(3):
        master = h.stack.apis()[0]
        children = master.children()
        if not children:
            time.sleep(1)
            continue
        pid = children[0]
        os.kill(pid, signal.SIGKILL)
        run.fault(f"kill -9 API worker process {pid} of {master.name} mid-request")
        time.sleep(2.5)
    master = h.stack.apis()[-1]
    h.stack.kill(master)
    run.fault(f"kill -9 API server {master.name} (master pid {master.pid} and its workers)")
    time.sleep(1)
    h.stack.replace(master)
    run.fault(f"API server on {master.url} restarted")


def failpoints(h: Harness, run: ScenarioRun) -> None:
    # A third API server with failpoints, and two workers of its own: the producers use it
    # too. (Restarting one of the two main servers instead would also measure the outage of
    # a whole server, which api-kill9 already does.)
    broken = h.stack.start_api(extra_env={"TASKFORGE_FAILPOINTS": FAILPOINTS})
    run.fault(f"API server {broken.name} started with failpoints {FAILPOINTS}")
    own_workers = [h.stack.start_worker(api_url=broken.url, tag="-fp") for _ in range(2)]
    (watchdog,) = h.stack.loops("run_watchdog")[:1]
    h.stack.stop(watchdog)
    watchdog_env = {"TASKFORGE_FAILPOINTS": "watchdog.after_expire=kill"}
    watchdog = h.stack.start_loop("run_watchdog", extra_env=watchdog_env, tag="-fp")
    run.fault("watchdog restarted with failpoint watchdog.after_expire=kill")
    victim = busy_worker(h, run)  # orphaned leases: the watchdog will have expiries to commit
    h.stack.kill(victim)
    run.fault(f"kill -9 worker {victim.worker_id}: its leases will expire")
    h.stack.start_worker()
    deaths = 0
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        # Like a supervisor: a watchdog that died right after committing an expiry is restarted.
        if not watchdog.alive():
            deaths += 1
            run.fault(f"watchdog killed itself after an expiry commit (#{deaths}); restarted")
            watchdog = h.stack.start_loop("run_watchdog", extra_env=watchdog_env, tag="-fp")
        time.sleep(0.2)
    run.notes["watchdog_failpoint_kills"] = deaths
    h.stack.stop(watchdog)
    h.stack.start_loop("run_watchdog")
    for worker in own_workers:
        h.stack.stop(worker)
    h.stack.stop(broken)
    run.notes["api_failpoint_kills"] = _api_worker_deaths(broken)
    run.fault("failpoints off: the failing API server and its workers stopped, a plain watchdog started")


def _api_worker_deaths(proc: Proc) -> int:
    # gunicorn's master logs each worker process that died of SIGKILL.
    return proc.log.read_text(errors="replace").count("was sent SIGKILL")


def verify_failpoints(h: Harness, run: ScenarioRun, result: CheckResult) -> list[str]:
    return [] if run.notes.get("api_failpoint_kills") else ["no API process was killed by a failpoint"]


# -- Redis ---------------------------------------------------------------------------------


def redis_flushall(h: Harness, run: ScenarioRun) -> None:
    for _ in range(2):
        h.redis.flushall()
        run.fault("Redis FLUSHALL")
        time.sleep(3)


def redis_down(h: Harness, run: ScenarioRun) -> None:
    h.redis.shutdown()
    run.fault("Redis shut down")
    time.sleep(10)
    h.redis.start()
    run.fault("Redis started again (empty)")
    time.sleep(2)


def garbage_ids(h: Harness, run: ScenarioRun) -> None:
    with psycopg.connect(h.database_url) as conn:
        foreign = [str(r[0]) for r in conn.execute("SELECT id FROM tf_task WHERE status = 'done' LIMIT 20")]
    client = h.redis.client()
    ready, scheduled = f"tf:{{{run.queue}}}:ready", f"tf:{{{run.queue}}}:scheduled"
    for round_ in range(5):
        junk = ["not-a-uuid", "", "\x00\xff", str(uuid.uuid4()), str(uuid.uuid4()).upper(), *foreign]
        client.zadd(ready, {member: 0 for member in junk})  # score 0: ahead of every real task
        client.zadd(scheduled, {f"0|{member}": 0 for member in junk[:4]} | {"garbage": 0})
        client.sadd("tf:scheduled-queues", run.queue)
        run.fault(f"garbage ids pushed into {ready} and {scheduled} (round {round_ + 1})")
        time.sleep(1.5)
    run.notes["foreign_done_ids"] = foreign


def verify_garbage(h: Harness, run: ScenarioRun, result: CheckResult) -> list[str]:
    with psycopg.connect(h.database_url) as conn:
        changed = conn.execute(
            "SELECT count(*) FROM tf_task_event WHERE task_id = ANY(%s::uuid[]) AND from_status = 'done'",
            [run.notes["foreign_done_ids"]],
        ).fetchone()[0]
    return [f"{changed} done task(s) pushed as garbage moved again"] if changed else []


# -- Postgres ---------------------------------------------------------------------------------


def pg_terminate(h: Harness, run: ScenarioRun) -> None:
    for _ in range(3):
        killed = terminate_backends(h.database_url)
        run.fault(f"pg_terminate_backend of all {killed} TaskForge connections")
        time.sleep(2.5)


def pg_restart(h: Harness, run: ScenarioRun) -> None:
    for _ in range(2):
        run.fault("Postgres fast restart (pg_ctl restart -m fast)")
        took = h.postgres.restart_fast()
        run.notes.setdefault("restart_seconds", []).append(round(took, 2))
        time.sleep(4)


# -- clocks -------------------------------------------------------------------------------------


def clock_skew(h: Harness, run: ScenarioRun) -> None:
    extra = [
        h.stack.start_worker(extra_env=skewed_env("+1h"), tag="-plus1h"),
        h.stack.start_worker(extra_env=skewed_env("-1h"), tag="-minus1h"),
        h.stack.start_loop("run_watchdog", extra_env=skewed_env("+1h"), tag="-plus1h"),
        h.stack.start_loop("run_scheduler", extra_env=skewed_env("-1h"), tag="-minus1h"),
        h.stack.start_loop("run_dispatcher", extra_env=skewed_env("+1h"), tag="-plus1h"),
    ]
    run.fault("workers at +1h/-1h, watchdog +1h, scheduler -1h, dispatcher +1h joined")
    time.sleep(8)
    for proc in extra:
        h.stack.stop(proc)
    run.notes["skewed_worker_tasks"] = done_by(h, [p.worker_id for p in extra if p.kind == "worker" and p.worker_id])


def verify_clock_skew(h: Harness, run: ScenarioRun, result: CheckResult) -> list[str]:
    problems = []
    if result.lease_expiries:
        problems.append(f"{result.lease_expiries} lease(s) expired although no worker failed")
    if not any(run.notes.get("skewed_worker_tasks", {}).values()):
        problems.append("the skewed workers completed no task")
    return problems


def baseline(h: Harness, run: ScenarioRun) -> None:
    time.sleep(4)


SCENARIOS = [
    Scenario("baseline", "no fault: the load alone", baseline, load_seconds=8),
    Scenario("worker-kill9", "kill -9 a worker mid-task (twice)", worker_kill9, 12, verify_worker_kill9),
    Scenario(
        "worker-stop-cont",
        "kill -STOP a worker for longer than the lease, then kill -CONT",
        worker_stop_cont,
        14,
        verify_worker_stop_cont,
    ),
    Scenario("worker-sigterm", "SIGTERM a busy worker: graceful drain", worker_sigterm, 12, verify_worker_sigterm),
    Scenario("loop-kill9", "kill -9 scheduler, dispatcher and watchdog, restart each", loop_kill9, 16),
    Scenario("loops-doubled", "two copies of every loop at once", loops_doubled, 12),
    Scenario(
        "pusher-kill9",
        "kill -9 a pusher mid-delivery (twice), restart it",
        pusher_kill9,
        18,
        verify_pusher_kill9,
        push=True,
    ),
    Scenario("api-kill9", "kill -9 API processes mid-request, and a whole API server", api_kill9, 16),
    Scenario(
        "failpoints",
        "crash between commit and response (claim, ack, enqueue, watchdog)",
        failpoints,
        18,
        verify_failpoints,
    ),
    Scenario("redis-flushall", "Redis FLUSHALL under load (twice)", redis_flushall, 10),
    Scenario("redis-down", "Redis shut down for 10 s, then restarted empty", redis_down, 17),
    Scenario("garbage-ids", "unknown, done and malformed ids in the dispatch sets", garbage_ids, 10, verify_garbage),
    Scenario("pg-terminate", "pg_terminate_backend of TaskForge's connections (3 times)", pg_terminate, 10),
    Scenario("clock-skew", "a worker and loops with clocks skewed by +-1 h", clock_skew, 12, verify_clock_skew),
    Scenario("pg-restart", "fast Postgres restart under load (twice)", pg_restart, 12, restartable_postgres=True),
    Scenario("redis-oom", "Redis out of memory (noeviction) under load (twice)", resources.redis_oom, 14),
    Scenario("pg-disk-full", "Postgres out of disk (twice)", resources.pg_disk_full, 14, resources.verify_refusals),
]
