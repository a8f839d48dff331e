"""The fault harness: the stack under test, and one scenario run under load and checked.

:class:`Harness` starts Postgres (a dedicated database, or an embedded server
it may restart), a private Redis, two API servers, the loops and the workers;
:meth:`Harness.run_scenario` creates a queue, starts the producers, lets the
scenario inject its faults, heals the stack, waits for every task to finish
and runs the checker. ``faults.run`` chooses the scenarios and sums them up;
``faults.multinode`` is the same harness over the multi-node topology.
"""

from __future__ import annotations

import json
import secrets
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from faults import checker
from faults.load import Producer, create_queue, probe
from faults.scenarios import Scenario
from faults.services import EmbeddedPostgres, MachinePostgres, RedisServer
from faults.stack import LEASE_SECONDS, LOOPS, Proc, Stack

WARMUP_SECONDS = 2.0
SETTLE_TIMEOUT_SECONDS = 60.0


@dataclass
class ScenarioRun:
    scenario: Scenario
    queue: str
    harness: Harness
    faults: list[dict[str, Any]] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    protected: list[Proc] = field(default_factory=list)
    probes: list[threading.Thread] = field(default_factory=list)
    probe_tasks: list[str] = field(default_factory=list)
    #: Lines the scenario's own checks add to its result (printed under it, kept in the summary).
    report: list[str] = field(default_factory=list)

    def fault(self, label: str) -> None:
        """Record a fault now and measure how long until fresh work completes again."""
        entry: dict[str, Any] = {"fault": label, "at": time.time(), "probe_s": None}
        self.faults.append(entry)
        print(f"    fault: {label}", flush=True)

        def measure() -> None:
            outcome = probe(self.harness.api_urls, self.harness.stack.producer_key, self.queue)
            if outcome is not None:
                task_id, seconds = outcome
                self.probe_tasks.append(task_id)
                entry["probe_s"] = round(seconds, 2) if seconds is not None else None

        thread = threading.Thread(target=measure, daemon=True)
        thread.start()
        self.probes.append(thread)


class Harness:
    #: Whether this is the multi-node topology (``faults.multinode``): its engines have faults of their own.
    multinode = False

    def __init__(self, run_dir: Path, postgres: MachinePostgres | EmbeddedPostgres, workers: int, rate: float) -> None:
        self.run_dir = run_dir
        self.postgres = postgres
        self.redis = RedisServer(run_dir)
        self.workers = workers
        self.rate = rate
        self.stack: Stack
        # Execution lines carry CLOCK_MONOTONIC; this turns them into wall time.
        self.mono_to_wall = time.time() - time.monotonic()

    @property
    def database_url(self) -> str:
        return self.postgres.url

    def api_urls(self) -> list[str]:
        return [p.url for p in self.stack.apis()]

    def worker_api_url(self) -> str | None:
        """Where a new worker connects; None: any API server."""
        return None

    def start(self) -> None:
        self.postgres.start()
        self.redis.start()
        self.stack = Stack(
            run_dir=self.run_dir,
            database_url=self.postgres.url,
            redis_url=self.redis.url,
            secret_key=secrets.token_urlsafe(50),
        )
        self.stack.prepare()
        for _ in range(2):
            self.stack.start_api()
        for command in LOOPS:
            self.stack.start_loop(command)
        for _ in range(self.workers):
            self.stack.start_worker()

    def stop(self) -> None:
        try:
            self.stack.stop_all()
        finally:
            self.redis.shutdown()
            self.postgres.stop()

    def heal(self, run: ScenarioRun) -> None:
        """Back to the nominal stack: Redis up, everything resumed, dead processes replaced."""
        if self.redis.pid is None:
            self.redis.start()
        for proc in self.stack.procs:
            proc.signal(signal.SIGCONT)
        apis = self.stack.apis()
        if len(apis) < 2:
            for dead in [p for p in self.stack.procs if p.kind == "api" and not p.alive()][-(2 - len(apis)) :]:
                self.stack.replace(dead)
        for command in LOOPS:
            if not self.stack.loops(command):
                self.stack.start_loop(command)
        self.top_up_workers()

    def top_up_workers(self) -> None:
        """Start workers until the nominal ones (not a scenario's extra, failpoint or skewed ones) are back."""
        nominal = [p for p in self.stack.workers() if not any(t in p.name for t in ("-plus", "-minus", "-fp", "-skew"))]
        for _ in range(self.workers - len(nominal)):
            self.stack.start_worker(api_url=self.worker_api_url())

    def api_errors(self, since: float) -> tuple[int, int]:
        """500s (unhandled errors) and 503s (database unavailable) the API servers logged since ``since``."""
        internal = unavailable = 0
        for proc in self.stack.procs:
            if proc.kind != "api" or not proc.log.exists():
                continue
            for raw in proc.log.read_text(errors="replace").splitlines():
                if '"unhandled error"' not in raw and '"db.unavailable"' not in raw:
                    continue
                try:
                    line = json.loads(raw)
                    at = datetime.fromisoformat(line["ts"].replace("Z", "+00:00")).timestamp()
                except (ValueError, KeyError):
                    continue
                if at >= since:
                    internal += line.get("message") == "unhandled error"
                    unavailable += line.get("event") == "db.unavailable"
        return internal, unavailable

    def unfinished(self, queue: str) -> int:
        with psycopg.connect(self.database_url) as conn:
            return conn.execute(
                "SELECT count(*) FROM tf_task t JOIN tf_queue q ON q.id = t.queue_id "
                "WHERE q.name = %s AND t.status NOT IN ('done', 'dead', 'cancelled')",
                [queue],
            ).fetchone()[0]

    def run_scenario(self, scenario: Scenario) -> dict[str, Any]:
        queue = f"faults-{scenario.name}"
        settings: dict[str, Any] = {}
        if scenario.push:
            receiver = self.stack.receiver()
            settings["push"] = {"url": receiver.url, "max_concurrent": 50, "timeout_seconds": LEASE_SECONDS * 2}
        create_queue(self.api_urls()[0], self.stack.admin_key, queue, **settings)
        run = ScenarioRun(scenario=scenario, queue=queue, harness=self)
        producer = Producer(apis=self.api_urls, api_key=self.stack.producer_key, queue=queue, rate=self.rate,
                            fail_every=None if scenario.push else 25)  # fmt: skip
        started, wall_started = time.monotonic(), time.time()
        print(f"\n== {scenario.name}: {scenario.description}", flush=True)
        producer.start()
        time.sleep(WARMUP_SECONDS)
        error = None
        try:
            scenario.inject(self, run)
        except Exception:
            error = traceback.format_exc()
        remaining = scenario.load_seconds - (time.monotonic() - started)
        if remaining > 0:
            time.sleep(remaining)
        producer.stop()
        self.heal(run)
        settle_started = time.monotonic()
        while self.unfinished(queue) and time.monotonic() - settle_started < SETTLE_TIMEOUT_SECONDS:
            time.sleep(0.25)
        for thread in run.probes:
            thread.join(SETTLE_TIMEOUT_SECONDS)
        # Late calls from stale leases (a resumed worker, a retried ack) land now; let them.
        time.sleep(1.5)
        while self.unfinished(queue) and time.monotonic() - settle_started < SETTLE_TIMEOUT_SECONDS:
            time.sleep(0.25)
        settle = time.monotonic() - settle_started

        accepted = {a.task_id: a.failing for a in producer.accepted}
        accepted.update({task_id: False for task_id in run.probe_tasks})
        if scenario.push:
            executions = checker.read_deliveries(self.stack.deliveries_log, self.mono_to_wall)
        else:
            executions = checker.read_executions(self.stack.exec_dir, self.mono_to_wall)
        result = checker.check_queue(self.database_url, queue, accepted, executions, LEASE_SECONDS, push=scenario.push)
        problems = [f"inject failed:\n{error}"] if error else []
        if scenario.verify is not None and not error:
            try:
                problems += scenario.verify(self, run, result)
            except Exception:
                problems.append(f"verify failed:\n{traceback.format_exc()}")
        for entry in run.faults:
            entry["drain_s"] = checker.drain_seconds(self.database_url, queue, entry["at"])
            if entry["drain_s"] is not None:
                entry["drain_s"] = round(entry["drain_s"], 2)
        summary = scenario_summary(
            scenario.name,
            scenario.description,
            result,
            problems,
            self.api_errors(wall_started),
            producer,
            settle=settle,
            started=started,
            faults=[{k: v for k, v in f.items() if k != "at"} for f in run.faults],
            notes=run.notes,
            report=run.report,
        )
        print_scenario(summary)
        return summary


def scenario_summary(
    name: str,
    description: str,
    result: checker.CheckResult,
    problems: list[str],
    api_errors: tuple[int, int],
    producer: Producer,
    *,
    settle: float,
    started: float,
    faults: list[dict[str, Any]],
    notes: dict[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    """What a scenario's run reports (``print_scenario`` prints it; the JSON summary keeps it)."""
    errors_500, errors_503 = api_errors
    return {
        "scenario": name,
        "description": description,
        "ok": result.ok and not problems,
        **result.summary(),
        "api_500s": errors_500,
        "api_503s": errors_503,
        "enqueue_retries": producer.retried,
        "enqueues_given_up": len(producer.given_up),
        "settle_s": round(settle, 1),
        "wall_s": round(time.monotonic() - started, 1),
        "faults": faults,
        "notes": notes,
        **extra,
        "problems": problems,
        "violation_examples": dict(result.violations),
    }


def print_scenario(s: dict[str, Any]) -> None:
    verdict = "PASS" if s["ok"] else "FAIL"
    print(
        f"  {verdict} {s['scenario']}: {s['tasks']} tasks ({s['done']} done, {s['dead']} dead), lost {s['lost']}, "
        f"stuck {s['stuck']}, duplicates {s['duplicate_executions']} ({s['duplicates_per_10k']}/10k), "
        f"lease expiries {s['lease_expiries']}, stale runs {s['late_starts']} late + "
        f"{s['zombie_overlaps']} overlapping, API 500s {s['api_500s']} / 503s {s['api_503s']}, "
        f"settle {s['settle_s']}s",
        flush=True,
    )
    for line in s.get("report", []):
        print(f"    {line}")
    for f in s["faults"]:
        print(f"    recovery after '{f['fault']}': probe {f['probe_s']}s, drain {f['drain_s']}s")
    for problem in s["problems"]:
        print(f"    PROBLEM: {problem}")
    for rule, examples in s["violation_examples"].items():
        print(f"    VIOLATION {rule}: {examples}")
