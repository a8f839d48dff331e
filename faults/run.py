"""The command: choose the scenarios, run each on a harness (``faults.harness``), check, summarise.

``python -m faults [--only NAME,...] [--workers N] [--rate R] [--budget SECONDS]``

Per scenario: a fresh queue; producers start; after a warm-up the scenario
injects its faults (each starts a recovery probe); the load runs for the
scenario's duration and stops; everything broken is healed; once every task
of the queue is finished (and leases had time to expire) the checker runs.
All scenarios but ``pg-restart`` run on the machine's Postgres (a dedicated
database); ``pg-restart`` runs on a second stack over an embedded Postgres
that the harness may restart. Exit status 0 only when every check passed.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import psycopg

from faults import makerun
from faults.harness import Harness, print_scenario
from faults.scenarios import SCENARIOS, Scenario
from faults.services import EmbeddedPostgres, MachinePostgres
from faults.soak import soak, verify_soak

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/taskforge_faults"
MULTINODE_SOAK_MINUTES = 3.0


def _totals(results: list[dict[str, Any]], elapsed: float) -> dict[str, Any]:
    tasks = sum(r["tasks"] for r in results)
    duplicates = sum(r["duplicate_executions"] for r in results)
    recoveries = [f for r in results for f in r["faults"]]
    return {
        "scenarios": len(results),
        "passed": sum(r["ok"] for r in results),
        "tasks": tasks,
        "faults_injected": len(recoveries),
        "lost": sum(r["lost"] for r in results),
        "stuck": sum(r["stuck"] for r in results),
        "duplicate_executions": duplicates,
        "duplicates_per_10k": round(10_000 * duplicates / tasks, 1) if tasks else 0.0,
        "duplicate_completions": sum(r["duplicate_completions"] for r in results),
        "violations": sum(sum(r["violations"].values()) for r in results),
        "max_probe_recovery_s": max((f["probe_s"] for f in recoveries if f["probe_s"] is not None), default=None),
        "max_drain_recovery_s": max((f["drain_s"] for f in recoveries if f["drain_s"] is not None), default=None),
        "wall_s": round(elapsed, 1),
    }


def _print_totals(results: list[dict[str, Any]], totals: dict[str, Any]) -> None:
    print("\n== summary")
    print(f"{'scenario':<18} {'ok':<4} {'tasks':>6} {'lost':>5} {'dup/10k':>8} {'expired':>8} {'max probe s':>12} "
          f"{'max drain s':>12}")  # fmt: skip
    for r in results:
        probes = [f["probe_s"] for f in r["faults"] if f["probe_s"] is not None]
        drains = [f["drain_s"] for f in r["faults"] if f["drain_s"] is not None]
        print(
            f"{r['scenario']:<18} {'yes' if r['ok'] else 'NO':<4} {r['tasks']:>6} {r['lost']:>5} "
            f"{r['duplicates_per_10k']:>8} {r['lease_expiries']:>8} {max(probes, default='-'):>12} "
            f"{max(drains, default='-'):>12}"
        )
    print(
        f"\ntasks {totals['tasks']}, faults injected {totals['faults_injected']}, lost {totals['lost']}, "
        f"duplicate executions {totals['duplicate_executions']} ({totals['duplicates_per_10k']} per 10k tasks), "
        f"invariant violations {totals['violations']}, scenarios passed {totals['passed']}/{totals['scenarios']}, "
        f"wall {totals['wall_s']}s"
    )


def _harness_error(name: str) -> dict[str, Any]:
    return {"scenario": name, "ok": False, "tasks": 0, "lost": 0, "stuck": 0,
            "duplicate_executions": 0, "duplicate_completions": 0, "duplicates_per_10k": 0.0,
            "lease_expiries": 0, "violations": {"harness error": 1}, "faults": []}  # fmt: skip


def soak_scenario(minutes: float) -> Scenario:
    # On the embedded Postgres: restarting it is part of the catalogue.
    return Scenario(
        "soak",
        f"the whole catalogue at random for {minutes:g} min",
        soak,
        load_seconds=minutes * 60,
        verify=verify_soak,
        restartable_postgres=True,
    )


def _on_any_postgres(scenario: Scenario) -> Scenario:
    """The soak on a Postgres it may not restart (the multi-node simulation's is the machine's)."""
    return dataclasses.replace(scenario, restartable_postgres=False)


def _reachable(url: str) -> bool:
    try:
        MachinePostgres(url).ping()
    except psycopg.Error:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    parser.add_argument("--workers", type=int, default=6, help="reference workers (4-8)")
    parser.add_argument("--rate", type=float, default=20.0, help="enqueues per second")
    parser.add_argument("--budget", type=float, default=660.0, help="skip scenarios that would start after this")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("TASKFORGE_FAULTS_DATABASE_URL", DEFAULT_DATABASE_URL),
        help="a database the harness may drop and recreate (never a shared one)",
    )
    parser.add_argument(
        "--postgres",
        choices=["auto", "machine", "embedded"],
        default="auto",
        help="machine: --database-url (plus an embedded server for pg-restart); embedded: an embedded server for "
        "everything; auto: machine when reachable",
    )
    parser.add_argument("--keep", action="store_true", help="keep the run directory (logs) even when all pass")
    parser.add_argument(
        "--soak-minutes",
        type=float,
        default=float(os.environ.get("FAULTS_SOAK_MINUTES") or 0),
        help="instead of the scenarios: the whole catalogue at random for this long (FAULTS_SOAK_MINUTES)",
    )
    parser.add_argument(
        "--multinode",
        nargs="?",
        const="cluster",
        choices=["cluster", "sentinel"],
        help="the soak through the multi-node simulation (faults.multinode): 3 API servers behind HAProxy, "
        "PgBouncer, a Redis Cluster (or Sentinel), two of each loop (default soak: 3 min)",
    )
    args = parser.parse_args(argv)
    if args.multinode and args.soak_minutes <= 0:
        args.soak_minutes = MULTINODE_SOAK_MINUTES
    # A SIGTERM (a CI timeout, pkill) unwinds through the finally blocks below,
    # which stop every process the harness started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.soak_minutes > 0:
        chosen = [soak_scenario(args.soak_minutes)]
        args.budget = float("inf")
    else:
        chosen = [s for s in SCENARIOS if not args.only or s.name in args.only.split(",")]
    with_make_run = not args.soak_minutes and (not args.only or makerun.NAME in args.only.split(","))
    if not chosen and not with_make_run:
        parser.error(f"no scenario matches {args.only!r}; known: {', '.join(s.name for s in SCENARIOS)}")

    run_dir = Path(tempfile.mkdtemp(prefix="taskforge-faults-"))
    print(f"run directory (logs, execution log, summary): {run_dir}", flush=True)
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    postgres = args.postgres
    if postgres == "auto":
        postgres = "machine" if _reachable(args.database_url) else "embedded"
    groups: list[tuple[str, Any, list[Scenario]]]
    if args.multinode:
        from faults import multinode  # it builds on this module

        if args.database_url == DEFAULT_DATABASE_URL:
            args.database_url = multinode.DATABASE_URL  # its own, beside a concurrent make test-faults

        if postgres != "machine":
            parser.error("--multinode needs the machine's Postgres (--database-url), which PgBouncer fronts")
        soak_on_machine = [_on_any_postgres(chosen[0])]
        label = f"multi-node simulation ({args.multinode})"
        groups = [(label, lambda d: MachinePostgres(args.database_url), soak_on_machine)]
        make_harness: Any = functools.partial(multinode.MultiNodeHarness, redis_mode=args.multinode)
    elif postgres == "embedded":
        groups = [("embedded Postgres", EmbeddedPostgres, chosen)]
    else:
        on_machine = [s for s in chosen if not s.restartable_postgres]
        groups = [
            ("machine Postgres", lambda d: MachinePostgres(args.database_url), on_machine),
            ("embedded Postgres", EmbeddedPostgres, [s for s in chosen if s.restartable_postgres]),
        ]
    for label, make_postgres, scenarios in groups:
        if not scenarios:
            continue
        group_dir = run_dir / label.split()[0]
        group_dir.mkdir()
        harness = (make_harness if args.multinode else Harness)(
            group_dir, make_postgres(group_dir), workers=args.workers, rate=args.rate
        )
        print(f"\n== starting the stack on the {label}", flush=True)
        try:
            harness.start()
            for scenario in scenarios:
                if time.monotonic() - started > args.budget:
                    print(f"  SKIPPED {scenario.name}: over the {args.budget:.0f}s budget")
                    continue
                results.append(harness.run_scenario(scenario))
        except Exception:
            traceback.print_exc()
            results.append(_harness_error(f"stack ({label})"))
        finally:
            harness.stop()

    if with_make_run:  # the same kills, against `make run` itself (faults/makerun.py)
        make_run_dir = run_dir / "make-run"
        make_run_dir.mkdir()
        url = os.environ.get("TASKFORGE_FAULTS_MAKERUN_DATABASE_URL", makerun.DEFAULT_DATABASE_URL)
        on = MachinePostgres(url) if postgres == "machine" else EmbeddedPostgres(make_run_dir)
        try:
            results.append(makerun.run_make_run(make_run_dir, on, rate=args.rate))
            print_scenario(results[-1])
        except Exception:
            traceback.print_exc()
            results.append(_harness_error(f"stack ({makerun.NAME})"))

    totals = _totals(results, time.monotonic() - started)
    _print_totals(results, totals)
    (run_dir / "summary.json").write_text(json.dumps({"totals": totals, "scenarios": results}, indent=2, default=str))
    print(f"summary: {run_dir / 'summary.json'}")
    ok = results and all(r["ok"] for r in results) and totals["lost"] == 0
    if ok and not args.keep:
        for sub in run_dir.iterdir():
            if sub.is_dir():
                shutil.rmtree(sub, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
