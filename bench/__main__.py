"""``python -m bench``: run every workload, print the table, write bench/results/<timestamp>.json.

Needs ``DATABASE_URL`` and ``REDIS_URL`` (``make bench`` provides embedded
servers when they are unset). Each workload runs ``BENCH_RUNS`` times (3;
1 with ``BENCH_QUICK=1``) and reports the median with min and max. A
workload that fails is reported as failed and the others still run. Every
process the harness starts is stopped on exit, whatever the exit.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bench import (
    config,
    costs,
    drain,
    enqueue,
    peers,
    push,
    ratelimit,
    report,
    single_calls,
    single_producer,
    timing,
    trickle,
)
from bench.context import Context, reference_worker_available
from bench.procs import ROOT, Interrupted, Supervisor, raise_on_termination
from bench.profile import Profiler
from bench.stack import Stack, drop_database, start_dedicated_redis

RESULTS = ROOT / "bench" / "results"
KEEP_LOG_DIRS = 3

Workload = Callable[[Context, int], Any]


def _plan() -> list[tuple[str, Workload]]:
    # W6 comes late: its million finished tasks stay in tf_task until W7 resets the tables.
    return [
        ("W0", single_producer.w0),
        ("W1", enqueue.w1),
        ("W2", enqueue.w2),
        ("W3", drain.w3),
        ("W3N", drain.w3n),
        ("W3D", drain.w3d),
        ("W3K", drain.w3k),
        ("W3B", drain.w3b),
        ("W4", timing.w4),
        ("W5", timing.w5),
        ("W8", trickle.w8),
        ("CALLS", single_calls.calls),
        ("CAP", costs.cap),
        ("W9", push.w9),
        ("W6", drain.w6),
        ("W7", ratelimit.w7),
    ]


def _profiled(cfg: config.Config) -> dict[str, tuple[Workload, float]]:
    """Workloads profiled once more, unscored, after their measured runs (and for how long)."""
    return {
        "W1": (enqueue.w1, cfg.w1_seconds + 1),
        "W2": (enqueue.w2, cfg.w2_seconds + 1),
        "W3": (drain.w3_batch, 8.0),
        "W3N": (drain.w3n, 8.0),
        "W8": (trickle.w8_taskforge, cfg.w8_seconds + 1),
    }


def _worker_class() -> str:
    """The API's gunicorn worker class, as gunicorn.conf.py names it."""
    return str(runpy.run_path(str(ROOT / "gunicorn.conf.py"))["worker_class"])


def _prune_old_logs() -> None:
    dirs = sorted(RESULTS.glob("*.logs.tmp"))
    for old in dirs[:-KEEP_LOG_DIRS]:
        shutil.rmtree(old, ignore_errors=True)


def main() -> int:
    cfg = config.from_env()
    raise_on_termination()
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        print("bench: DATABASE_URL and REDIS_URL must be set (make bench starts embedded servers)", file=sys.stderr)
        return 2
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    log_dir = RESULTS / f"{stamp}.logs.tmp"
    log_dir.mkdir()
    _prune_old_logs()
    supervisor = Supervisor(log_dir)
    python = os.environ.get("BENCH_TASKFORGE_PYTHON") or str(ROOT / ".venv" / "bin" / "python")
    redis_server, redis_url = None, os.environ["REDIS_URL"]
    if cfg.dedicated_redis:
        redis_server, redis_url = start_dedicated_redis(supervisor)
    stack = Stack(
        server_database_url=os.environ["DATABASE_URL"],
        server_redis_url=redis_url,
        database_name=cfg.database,
        redis_db=cfg.redis_db,
        web_concurrency=cfg.web_concurrency,
        pool_size=cfg.pool_size,
        python=python,
        supervisor=supervisor,
        serving=cfg.serving,
        gthread_threads=cfg.gthread_threads,
        redis_server=redis_server,
    )
    ctx = Context(cfg=cfg, stack=stack, supervisor=supervisor, log_dir=log_dir)
    kind = os.environ.get("BENCH_WORKER") or ("reference" if reference_worker_available() else "harness")
    ctx.worker_kind = kind
    if kind == "reference":
        ctx.extra["reference_worker_args"] = ["--log-format", "text"]
    document: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(),
        "mode": "quick" if cfg.quick else "full",
        "complete": False,
        "machine": report.machine(),
        "load_average_at_start": os.getloadavg(),
        "git": report.git(),
        "settings": {
            "bench": {k: v for k, v in cfg.__dict__.items()},
            "worker": kind,
            "taskforge": {
                "serving": f"gunicorn -c gunicorn.conf.py ({_worker_class()})"
                if cfg.serving == "asgi"
                else f"gunicorn -c gunicorn.conf.py taskforge.wsgi -k gthread --threads {cfg.gthread_threads}",
                "WEB_CONCURRENCY": cfg.web_concurrency,
                "TASKFORGE_DB_POOL_SIZE": cfg.pool_size,
                "DJANGO_LOG_LEVEL": os.environ.get("DJANGO_LOG_LEVEL", "INFO (default)"),
            },
            "celery": "celery worker -P prefork -c 2, Redis broker, task_ignore_result, other settings default",
            "huey": "RedisHuey (results off), huey_consumer -k process -w 2 -q, other settings default",
            "pgqueuer": "pgq install --durability durable in the bench database, 2 x pgq run (psycopg driver)",
            "peer_versions": report.peer_versions(),
            "versions": report.taskforge_versions(python),
        },
        "failures": {},
    }
    failures: dict[str, str] = document["failures"]
    began = time.monotonic()
    try:
        print(f"bench: {document['mode']} run, {cfg.runs} run(s) per workload, worker: {kind}", flush=True)
        print(f"bench: logs in {log_dir.relative_to(ROOT)}", flush=True)
        stack.reset_database()
        stack.start()
        document["settings"]["services"] = report.services(ctx)
        modules = (single_producer, enqueue, drain, timing, ratelimit, trickle, single_calls, costs, push)
        for module in modules:
            module.define(ctx)
        ctx.extra["queue_ids"] = {}
        for module in modules:
            module.setup(ctx)
        for name, workload in _plan():
            if not cfg.wants(name):
                continue
            try:
                if name == "W6":
                    print(f"== W6 reference: W3's drain, {cfg.runs} run(s)", flush=True)
                    drain.measure_reference(ctx)
                    print(f"== W6 setup: {cfg.w6_history:,} finished tasks", flush=True)
                    drain.setup_history(ctx)
                    document["explain"] = _explain(ctx)
                started = time.monotonic()
                for run in range(cfg.runs):
                    print(f"== {name} run {run + 1}/{cfg.runs}", flush=True)
                    workload(ctx, run)
                    stack.check_alive()
                if cfg.profile and name in _profiled(cfg):
                    document.setdefault("profiles", {})[name] = _profile(ctx, name)
                if cfg.profile and name == "CALLS":
                    document.setdefault("profiles", {}).update(single_calls.profile_each(ctx))
                document.setdefault("workload_seconds", {})[name] = round(time.monotonic() - started, 1)
            except (KeyboardInterrupt, Interrupted):
                raise
            except Exception as exc:  # one broken workload must not hide the others
                failures[name] = f"{type(exc).__name__}: {exc}"
                print(f"!! {name} failed: {exc}", file=sys.stderr, flush=True)
                traceback.print_exc()
                for child in list(supervisor.children):
                    if child not in (stack.api, *stack.loops, stack.redis_server):
                        supervisor.stop(child, grace=5)
                stack.check_alive()
        document["complete"] = True
    except (KeyboardInterrupt, Interrupted) as exc:
        failures["interrupted"] = type(exc).__name__
        print("\nbench: interrupted; stopping every process", file=sys.stderr, flush=True)
    except Exception as exc:  # still write what was measured
        failures["harness"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    finally:
        supervisor.stop_all()
        peers.close_all(ctx)
        document["finished_at"] = datetime.now(UTC).isoformat()
        document["duration_seconds"] = round(time.monotonic() - began, 1)
        document["load_average_at_end"] = os.getloadavg()
        document["figures"] = [f.as_dict() for f in ctx.figures if f.reported]
        document["notes"] = ctx.notes
        document["w6_setup_seconds"] = ctx.extra.get("w6_setup_seconds")
        document["log_dir"] = str(log_dir.relative_to(ROOT))
        out = RESULTS / f"{stamp}.json"
        report.write(ctx, out, document)
        if os.environ.get("BENCH_KEEP_DB", "") in ("", "0"):
            _drop_database(stack)
        print()
        print(report.table([f for f in ctx.figures if f.reported]))
        print(f"\nbench: {document['duration_seconds']}s; results in {out.relative_to(ROOT)}")
        if failures:
            print(f"bench: FAILED: {json.dumps(failures)}", file=sys.stderr)
    return 0 if document["complete"] and not failures else 1


def _profile(ctx: Context, name: str) -> dict[str, Any]:
    workload, seconds = _profiled(ctx.cfg)[name]
    print(f"== {name} profiling run (py-spy on the API workers, not scored)", flush=True)
    ctx.profiler = Profiler(ctx, name, seconds)
    ctx.figures.recording = False
    try:
        workload(ctx, 0)
        return ctx.profiler.finish()
    finally:
        ctx.profiler = None
        ctx.figures.recording = True


def _explain(ctx: Context) -> dict[str, str]:
    """Plans of the claim and stats queries on the history table, with W3's tasks pending."""
    ctx.preload(drain.HISTORY_QUEUE, ctx.cfg.w3_tasks)
    done = subprocess.run(
        [ctx.stack.python, "-m", "bench.explain", drain.HISTORY_QUEUE],
        cwd=ROOT,
        env=ctx.stack.env(DJANGO_LOG_LEVEL="WARNING"),
        capture_output=True,
        text=True,
        check=False,
    )
    # Drain them again so W6 starts from the same state as W3 (only finished history).
    with ctx.stack.connect() as pg:
        queue_id = ctx.extra["queue_ids"][drain.HISTORY_QUEUE]
        pg.execute(
            "DELETE FROM tf_task_event WHERE task_id IN "
            "(SELECT id FROM tf_task WHERE queue_id = %s AND status = 'pending')",
            [queue_id],
        )
        pg.execute("DELETE FROM tf_task WHERE queue_id = %s AND status = 'pending'", [queue_id])
    ctx.stack.redis().flushdb()
    try:
        plans = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": done.stderr[-2000:]}
    (ctx.log_dir / "explain.txt").write_text("\n\n".join(f"-- {k}\n{v}" for k, v in plans.items()))
    return plans


def _drop_database(stack: Stack) -> None:
    import psycopg

    try:
        drop_database(stack.server_database_url, stack.database_name)
    except psycopg.Error as exc:
        print(f"bench: could not drop {stack.database_name}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
