"""The invariants, checked after each scenario from Postgres and the execution log.

Run once the load has stopped and every lease has had time to expire. For one
queue it reads ``tf_task`` and ``tf_task_event`` and the handler's execution
lines, and asserts:

1. no loss: every accepted enqueue exists and reached ``done`` or ``dead``,
   and no task of the queue is stuck in ``pending``/``claimed``/``executing``/
   ``retry``;
2. one terminal transition per task (one move to ``done`` or to ``dead``);
3. a consistent history: every transition starts from the previous one's
   target state;
4. leases never overlap: a task is claimed again only after its previous lease
   ended (ack, nack or expiry), and every execution in the log belongs to a
   lease its worker was granted (executions that ran on after their lease was
   lost, as a paused worker's do, are counted as stale: see 5);
5. no stale heartbeat, ack or nack was accepted: every event a worker caused
   belongs to the current lease, comes from that lease's worker and arrived
   before the lease ran out (claim or last heartbeat + lease length), and the
   result of a done task names the execution that held the last lease;
6. ``dead`` only after exactly ``1 + max_retries`` failed attempts;
7. duplicates are counted, not forbidden (delivery is at least once): extra
   executions of tasks whose handler succeeds, per 10,000 tasks.

A push queue's tasks are run by pushers, not workers: there the receiver's
deliveries (``faults.receiver``) stand for the executions. A delivery carries
its attempt, so it belongs to that attempt's lease: it must arrive after that
lease was granted, each lease is delivered at most once, and a done task's
result must be the receiver's answer to its last attempt.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

LEASED = ("claimed", "executing")
TERMINAL = ("done", "dead")
# How the history marks a task a worker handed back unstarted (nack with release: true): its
# attempt was given back, so that move is no failed attempt (queues.lifecycle.decide).
RELEASED_DETAIL_PREFIX = "released: "


def _released(detail: str | None) -> bool:
    return bool(detail) and str(detail).startswith(RELEASED_DETAIL_PREFIX)


# now() is the transaction's start; logs and Postgres share the machine clock. Slack for both.
TOLERANCE_SECONDS = 0.05
MAX_EXAMPLES = 5


@dataclass
class Lease:
    worker: str
    start: float
    renewed: float
    end: float | None = None
    end_kind: str = ""  # done, retry, dead (how the lease ended)
    executions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CheckResult:
    queue: str
    tasks: int = 0
    accepted: int = 0
    done: int = 0
    dead: int = 0
    lost: int = 0
    stuck: int = 0
    executions: int = 0
    duplicate_executions: int = 0  # extra starts of tasks whose handler succeeds
    duplicate_completions: int = 0  # extra successful runs of such tasks
    zombie_overlaps: int = 0  # a stale execution still running when the next lease began
    late_starts: int = 0  # an execution that started after its lease had ended (worker paused after claim)
    lease_expiries: int = 0
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def fail(self, rule: str, example: str) -> None:
        self.violations[rule].append(example)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def duplicates_per_10k(self) -> float:
        return 10_000 * self.duplicate_executions / self.tasks if self.tasks else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "tasks": self.tasks,
            "accepted": self.accepted,
            "done": self.done,
            "dead": self.dead,
            "lost": self.lost,
            "stuck": self.stuck,
            "executions": self.executions,
            "duplicate_executions": self.duplicate_executions,
            "duplicate_completions": self.duplicate_completions,
            "duplicates_per_10k": round(self.duplicates_per_10k, 1),
            "zombie_overlaps": self.zombie_overlaps,
            "late_starts": self.late_starts,
            "lease_expiries": self.lease_expiries,
            "violations": {rule: len(examples) for rule, examples in self.violations.items()},
        }


def read_executions(exec_dir: Path, mono_to_wall: float) -> dict[str, list[dict[str, Any]]]:
    """Execution log lines by task id, with ``start``/``end`` in wall time; ``end`` None if killed."""
    runs: dict[tuple[str, str | None, str], dict[str, Any]] = {}
    for path in sorted(exec_dir.glob("exec-*.jsonl")):
        for raw in path.read_text().splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue  # a line cut short by kill -9 (the write itself is one syscall; paranoia)
            key = (line["task"], line.get("lease"), line["worker"])
            run = runs.setdefault(key, {"task": line["task"], "lease": line.get("lease"), "worker": line["worker"]})
            if line["e"] == "start":
                run["start"] = line["mono"] + mono_to_wall
            else:
                run["end"] = line["mono"] + mono_to_wall
                run["outcome"] = line["outcome"]
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs.values():
        run.setdefault("end", None)
        run.setdefault("outcome", None)
        if "start" in run:
            by_task[run["task"]].append(run)
    return by_task


def read_deliveries(path: Path, mono_to_wall: float) -> dict[str, list[dict[str, Any]]]:
    """The push receiver's deliveries by task id, one run each (with its ``attempt``), ``start``/``end``
    in wall time; ``end`` None for a delivery its pusher never waited for (killed mid-request)."""
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if not path.exists():
        return by_task
    for raw in path.read_text().splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        runs = by_task[line["task"]]
        if line["e"] == "start":
            runs.append({"task": line["task"], "attempt": line["attempt"], "worker": None, "lease": None,
                         "start": line["mono"] + mono_to_wall, "end": None, "outcome": None})  # fmt: skip
            continue
        for run in runs:  # the earliest delivery of that attempt still open
            if run["attempt"] == line["attempt"] and run["end"] is None:
                run["end"], run["outcome"] = line["mono"] + mono_to_wall, line["outcome"]
                break
    return by_task


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def check_queue(
    database_url: str,
    queue: str,
    accepted: dict[str, bool],
    executions: dict[str, list[dict[str, Any]]],
    lease_seconds: float,
    *,
    push: bool = False,
) -> CheckResult:
    """``accepted``: task id -> whether its payload fails on purpose. ``push``: the queue is a push
    queue and ``executions`` are the receiver's deliveries (``read_deliveries``)."""
    result = CheckResult(queue=queue, accepted=len(accepted))
    with psycopg.connect(database_url) as conn:
        tasks = {
            str(row[0]): row
            for row in conn.execute(
                "SELECT t.id, t.status, t.attempts, t.max_retries, t.result, t.lease_token, t.claimed_by, "
                "t.payload FROM tf_task t JOIN tf_queue q ON q.id = t.queue_id WHERE q.name = %s",
                [queue],
            )
        }
        # By id, not time: ``at`` is each transaction's start, so a claim that began
        # just before the promote it depends on can carry the earlier time, while
        # ids are drawn in the order the rows were really written.
        events: dict[str, list[tuple]] = defaultdict(list)
        for row in conn.execute(
            "SELECT e.task_id, e.kind, e.at, e.from_status, e.to_status, e.worker_id, e.detail "
            "FROM tf_task_event e JOIN tf_queue q ON q.id = e.queue_id WHERE q.name = %s ORDER BY e.id",
            [queue],
        ):
            events[str(row[0])].append(row)

    result.tasks = len(tasks)
    for task_id in accepted:
        row = tasks.get(task_id)
        if row is None or row[1] not in TERMINAL:
            result.lost += 1
            result.fail("lost", f"accepted task {task_id} is {row[1] if row else 'missing'}")
    for task_id, row in tasks.items():
        status, attempts, max_retries, task_result, lease_token, claimed_by, payload = row[1:]
        if isinstance(payload, str):
            payload = json.loads(payload)
        if isinstance(task_result, str):
            task_result = json.loads(task_result)
        if status not in TERMINAL:
            result.stuck += 1
            result.fail("stuck", f"task {task_id} is still {status}")
        result.done += status == "done"
        result.dead += status == "dead"
        runs = executions.get(task_id, [])
        result.executions += len(runs)
        leases = _check_history(result, task_id, events[task_id], lease_seconds)
        (_match_deliveries if push else _match_executions)(result, task_id, leases, runs)
        terminals = [e for e in events[task_id] if e[1] == "transition" and e[4] in TERMINAL]
        if status in TERMINAL and len(terminals) != 1:
            result.fail("one terminal transition", f"task {task_id} has {len(terminals)} terminal transitions")
        failed_attempts = sum(
            1
            for e in events[task_id]
            if e[1] == "transition" and e[3] in LEASED and e[4] in ("retry", "dead") and not _released(e[6])
        )
        if status == "dead" and (failed_attempts != 1 + max_retries or attempts != 1 + max_retries):
            result.fail(
                "dead after exactly 1 + max_retries attempts",
                f"task {task_id} died after {failed_attempts} failed attempts (attempts={attempts}, "
                f"max_retries={max_retries})",
            )
        if status == "done" and push:
            if task_result != {"task": task_id, "attempt": attempts}:
                result.fail("no stale ack accepted", f"task {task_id}: result {task_result} is not the answer to "
                            f"its last delivery (attempt {attempts})")  # fmt: skip
        elif status == "done":
            held = leases[-1] if leases else None
            if not task_result or task_result.get("lease") != lease_token or task_result.get("worker") != claimed_by:
                result.fail("no stale ack accepted", f"task {task_id}: result {task_result} is not from the last lease")
            elif held is None or held.worker != claimed_by:
                result.fail("no stale ack accepted", f"task {task_id}: done by {claimed_by}, last lease not theirs")
        if not payload.get("fail") and not payload.get("probe"):
            result.duplicate_executions += max(0, len(runs) - 1)
            result.duplicate_completions += max(0, sum(1 for r in runs if r["outcome"] == "ok") - 1)
    for rule in list(result.violations):
        result.violations[rule] = result.violations[rule][:MAX_EXAMPLES] + (
            [f"... and {len(result.violations[rule]) - MAX_EXAMPLES} more"]
            if len(result.violations[rule]) > MAX_EXAMPLES
            else []
        )
    return result


def _check_history(result: CheckResult, task_id: str, events: list[tuple], lease_seconds: float) -> list[Lease]:
    """Rebuild the task's leases from its events; flag broken histories and stale events."""
    leases: list[Lease] = []
    state: str | None = None
    current: Lease | None = None
    for _, kind, at_dt, from_status, to_status, worker, _detail in events:
        at = _ts(at_dt)
        assert at is not None
        if kind == "transition":
            if from_status != state:
                result.fail("consistent history", f"task {task_id}: {from_status}->{to_status} after {state}")
            state = to_status
        if kind == "transition" and to_status == "claimed":
            if current is not None:
                result.fail(
                    "leases never overlap", f"task {task_id}: claimed by {worker} while {current.worker} held it"
                )
            current = Lease(worker=worker, start=at, renewed=at)
            leases.append(current)
            continue
        caused_by_worker = worker is not None and (kind == "heartbeat" or from_status in LEASED)
        if caused_by_worker:
            if current is None or current.worker != worker:
                holder = current.worker if current else "nobody"
                result.fail("no stale heartbeat/ack/nack accepted", f"task {task_id}: {kind} {from_status}->"
                            f"{to_status} by {worker} while {holder} held the lease")  # fmt: skip
            elif at >= current.renewed + lease_seconds + TOLERANCE_SECONDS:
                result.fail(
                    "no stale heartbeat/ack/nack accepted",
                    f"task {task_id}: {kind} {from_status}->{to_status} by {worker} "
                    f"{at - current.renewed - lease_seconds:.2f}s after its lease ran out",
                )
            if current is not None and (kind == "heartbeat" or to_status == "executing"):
                current.renewed = at
        if kind == "transition" and from_status in LEASED and to_status in ("done", "retry", "dead"):
            if current is not None:
                current.end, current.end_kind = at, to_status
                if worker is None:
                    result.lease_expiries += 1
                    # The watchdog may only expire a lease that really ran out.
                    if at < current.renewed + lease_seconds - TOLERANCE_SECONDS:
                        result.fail(
                            "no healthy lease expired",
                            f"task {task_id}: expired {current.renewed + lease_seconds - at:.2f}s before its end",
                        )
            current = None
    return leases


def _match_executions(result: CheckResult, task_id: str, leases: list[Lease], runs: list[dict[str, Any]]) -> None:
    """Tie each execution to the lease its worker was granted; count the stale ones.

    A worker paused right after its claim (or mid-run) may start or finish a
    task after its lease is gone: that cannot be prevented from inside the
    worker, only made harmless, and _check_history verified that no such
    stale execution got an event accepted. Such runs are counted here; a run
    by a worker that was never granted a lease on the task is a violation.
    """
    for run in sorted(runs, key=lambda r: r["start"]):
        granted = [
            lease
            for lease in leases
            if lease.worker == run["worker"] and lease.start - TOLERANCE_SECONDS <= run["start"]
        ]
        if not granted:
            result.fail("executions run under a granted lease", f"task {task_id}: {run['worker']} ran it unclaimed")
            continue
        home = granted[-1]
        home.executions.append(run)
        if home.end is not None and run["start"] > home.end + TOLERANCE_SECONDS:
            result.late_starts += 1
    for earlier, later in itertools.pairwise(leases):
        for run in earlier.executions:
            if run["end"] is not None and run["end"] > later.start + TOLERANCE_SECONDS:
                result.zombie_overlaps += 1


def _match_deliveries(result: CheckResult, task_id: str, leases: list[Lease], runs: list[dict[str, Any]]) -> None:
    """Tie each push delivery to the lease of its attempt (the n-th claim); count the stale ones.

    A pusher sends one request per lease it was granted, after the claim committed. A delivery
    of an attempt that was never claimed, or before its claim, or a second one under the same
    lease, is a violation; one that started after its lease had ended (a pusher stalled past
    it) is counted as a late start, as for workers.
    """
    seen: set[int] = set()
    for run in sorted(runs, key=lambda r: r["start"]):
        attempt = run["attempt"]
        home = leases[attempt - 1] if 1 <= attempt <= len(leases) else None
        if home is None or run["start"] < home.start - TOLERANCE_SECONDS:
            result.fail("deliveries made under a granted lease", f"task {task_id}: attempt {attempt} delivered "
                        "without its claim")  # fmt: skip
            continue
        if attempt in seen:
            result.fail("one delivery per lease", f"task {task_id}: attempt {attempt} delivered twice")
        seen.add(attempt)
        home.executions.append(run)
        if home.end is not None and run["start"] > home.end + TOLERANCE_SECONDS:
            result.late_starts += 1
    for earlier, later in itertools.pairwise(leases):
        for run in earlier.executions:
            if run["end"] is not None and run["end"] > later.start + TOLERANCE_SECONDS:
                result.zombie_overlaps += 1


def drain_seconds(database_url: str, queue: str, fault_at: float) -> float | None:
    """Seconds from a fault until every non-failing task created before it had finished."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT extract(epoch FROM max(t.finished_at)) FROM tf_task t JOIN tf_queue q ON q.id = t.queue_id "
            "WHERE q.name = %s AND t.status = 'done' AND t.created_at <= to_timestamp(%s) "
            "AND NOT coalesce((t.payload->>'fail')::boolean, false)",
            [queue, fault_at],
        ).fetchone()
    if row is None or row[0] is None:
        return None
    return max(0.0, float(row[0]) - fault_at)
