"""W3 (drain a preloaded queue) with Celery's drain beside it, W3N (the naive worker,
2 processes x 4 threads), W3D (the reference worker at its defaults), W3K (W3 with the
worker run on an ``@app.task`` module, beside a W3 drain in each run), W3b (produce
while draining) and W6 (W3 again on top of a million finished tasks, compared with
W3's drain measured again just before the history goes in).

Drain rates are ``tasks / (last ack - first claim)``, both read from
``tf_task_event`` in Postgres, and every task must have exactly one ``done``
event. The rate from the moment the worker processes were spawned (so
including interpreter start-up) is recorded too.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from psycopg import sql

from bench import celery_peer, default_worker
from bench.context import Context
from bench.procs import Child
from bench.stack import tree_cpu_seconds

HISTORY_QUEUE = "bench_w6"
NAIVE_RATE = "drain tasks/s (naive: max_tasks=1, single acks)"
DEFAULTS_RATE = "drain tasks/s (reference worker, defaults)"
TASKS_RATE = "drain tasks/s (@app.task worker)"
# W3's drain measured again right before a drain compared with it (W3K, W6).
REFERENCE_RATE = "W3 drain tasks/s just before (reference)"
# The task bench/app_tasks.py defines, as noop.enqueue() would post it (the harness's own
# venv has no client package, so it does not import that module).
APP_TASK = {"kind": "bench.noop", "payload": {"args": [], "kwargs": {}}}


def _drain(
    ctx: Context,
    workload: str,
    queue: str,
    queue_id: uuid.UUID,
    count: int,
    kind: str,
    start: Callable[[], list[Child]] | None = None,
    preload: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Preload ``count`` tasks (``preload``: what they carry), then time ``kind`` workers
    (or whatever ``start`` spawns) draining them."""
    ids = ctx.preload(queue, count, **(preload or {}))
    with ctx.stack.connect() as pg:
        pg.execute("ANALYZE tf_task")
    ctx.begin_measure()
    api_cpu = ctx.stack.api_cpu_seconds()
    spawned = time.time()
    workers = start() if start is not None else ctx.start_workers(queue, kind=kind, label=workload.lower())
    ctx.wait_drained(queue_id, workers, ctx.cfg.drain_timeout)
    api_cpu = ctx.stack.api_cpu_seconds() - api_cpu
    worker_cpu = sum(tree_cpu_seconds(child.pid) for child in workers)
    ctx.stop_workers(workers)
    result = ctx.check_exactly_once(workload, ids)
    result["api_cpu_ms_per_task"] = api_cpu * 1000 / count
    result["worker_cpu_ms_per_task"] = worker_cpu * 1000 / count
    active = result["last_done"] - result["first_claim"]
    result["rate"] = count / active
    result["rate_from_spawn"] = count / (result["last_done"] - spawned)
    return result


def w3_batch(ctx: Context, run: int) -> dict[str, Any]:
    ctx.stack.reset_state()
    return _drain(ctx, "W3", "bench_w3", ctx.extra["queue_ids"]["bench_w3"], ctx.cfg.w3_tasks, ctx.worker_kind)


def w3(ctx: Context, run: int) -> None:
    cfg = ctx.cfg
    result = w3_batch(ctx, run)
    ctx.figures.add("W3", "drain tasks/s (batch)", result["rate"])
    ctx.figures.add("W3", "drain tasks/s incl. worker start", result["rate_from_spawn"])
    ctx.figures.add("W3", "API CPU per task (batch)", result["api_cpu_ms_per_task"])
    ctx.figures.add("W3", "worker CPU per task (batch)", result["worker_cpu_ms_per_task"])
    ctx.extra.setdefault("w3_rates", []).append(result["rate"])
    if not cfg.peers:
        for name in ("Celery drain tasks/s (prefork -c 2)", "Celery drain tasks/s incl. worker start",
                     "Celery worker CPU per task", "TaskForge / Celery drain"):  # fmt: skip
            ctx.figures.skip("W3", name, "BENCH_PEERS=0")
        return

    celery = celery_peer.drain(ctx, cfg.celery_tasks)
    ctx.figures.add("W3", "Celery drain tasks/s (prefork -c 2)", celery["rate"])
    ctx.figures.add("W3", "Celery drain tasks/s incl. worker start", celery["rate_from_spawn"])
    ctx.figures.add("W3", "Celery worker CPU per task", celery["worker_cpu_ms_per_task"])
    ctx.figures.add("W3", "TaskForge / Celery drain", result["rate"] / celery["rate"])


def w3n(ctx: Context, run: int) -> None:
    """The naive worker: each thread claims one task (max_tasks 1) and acks it alone."""
    cfg = ctx.cfg
    ctx.stack.reset_state()

    def start() -> list[Child]:
        return ctx.start_workers("bench_w3", kind="naive", concurrency=cfg.naive_threads, label="w3n")

    result = _drain(ctx, "W3N", "bench_w3", ctx.extra["queue_ids"]["bench_w3"], cfg.naive_tasks, "naive", start)
    ctx.figures.add("W3N", NAIVE_RATE, result["rate"])
    ctx.figures.add("W3N", "API CPU per task (naive)", result["api_cpu_ms_per_task"])


def w3d(ctx: Context, run: int) -> None:
    """The reference worker with no flags but its queue and handler (default concurrency, logging)."""
    cfg = ctx.cfg
    ctx.stack.reset_state()

    def start() -> list[Child]:
        return default_worker.start(ctx, "bench_w3", processes=cfg.worker_processes, label="w3d")

    result = _drain(ctx, "W3D", "bench_w3", ctx.extra["queue_ids"]["bench_w3"], cfg.defaults_tasks, "defaults", start)
    ctx.figures.add("W3D", DEFAULTS_RATE, result["rate"])
    ctx.figures.add("W3D", "drain tasks/s incl. worker start (defaults)", result["rate_from_spawn"])
    ctx.figures.add("W3D", "API CPU per task (defaults)", result["api_cpu_ms_per_task"])
    ctx.figures.add("W3D", "worker CPU per task (defaults)", result["worker_cpu_ms_per_task"])


def w3k(ctx: Context, run: int) -> None:
    """W3 with the reference worker run on ``bench.app_tasks``: the same no-op, looked up by kind.

    Each run drains W3's backlog first, as W3 does, and compares with that: W3's own runs
    come minutes earlier, on a machine whose speed drifts by more than what is compared.
    """
    w3 = w3_batch(ctx, run)
    reference = w3["rate"]
    ctx.figures.add("W3K", REFERENCE_RATE, reference)
    ctx.figures.add("W3K", "API CPU per task (reference)", w3["api_cpu_ms_per_task"])
    ctx.figures.add("W3K", "worker CPU per task (reference)", w3["worker_cpu_ms_per_task"])
    ctx.stack.reset_state()
    queue_id = ctx.extra["queue_ids"]["bench_w3"]
    result = _drain(ctx, "W3K", "bench_w3", queue_id, ctx.cfg.w3_tasks, "tasks", preload=APP_TASK)
    ctx.figures.add("W3K", TASKS_RATE, result["rate"])
    ctx.figures.add("W3K", "API CPU per task (@app.task)", result["api_cpu_ms_per_task"])
    ctx.figures.add("W3K", "worker CPU per task (@app.task)", result["worker_cpu_ms_per_task"])
    ctx.figures.add("W3K", "W3K / W3", result["rate"] / reference)


def w3b(ctx: Context, run: int) -> None:
    cfg = ctx.cfg
    ctx.stack.reset_state()
    queue_id = ctx.extra["queue_ids"]["bench_w3"]
    workers = ctx.start_workers("bench_w3", label="w3b")
    time.sleep(2.0)  # the workers are up and long-polling before the first enqueue

    async def produce() -> list[str]:
        conn = ctx.connection("producer")
        ids: list[str] = []
        try:
            for start in range(0, cfg.w3_tasks, 100):
                body = {"tasks": [{"payload": {"n": n}} for n in range(start, min(start + 100, cfg.w3_tasks))]}
                created = await conn.json("POST", "/queues/bench_w3/tasks/batch", body, expect=(201,))
                ids.extend(task["id"] for task in created["tasks"])
        finally:
            conn.close()
        return ids

    begun = time.perf_counter()
    ids = asyncio.run(produce())
    produced = time.perf_counter() - begun
    ctx.wait_drained(queue_id, workers, cfg.drain_timeout)
    ctx.stop_workers(workers)
    result = ctx.check_exactly_once("W3b", ids)
    ctx.figures.add("W3b", "end-to-end tasks/s", len(ids) / (result["last_done"] - result["first_created"]))
    ctx.figures.add("W3b", "producer tasks/s (while draining)", len(ids) / produced)


def setup_history(ctx: Context) -> None:
    """Insert the finished history W6 runs over: done tasks, each with its 'done' event."""
    cfg = ctx.cfg
    queue_id = ctx.extra["queue_ids"][HISTORY_QUEUE]
    began = time.perf_counter()
    with ctx.stack.connect() as pg:
        # Bulk load: secondary indexes are dropped and rebuilt afterwards from their own
        # definitions (a sorted build is many times faster than a million random inserts).
        # The schema afterwards is exactly the migrated one.
        indexes = pg.execute(
            """
            SELECT i.indexname, i.indexdef FROM pg_indexes i
            WHERE i.tablename IN ('tf_task', 'tf_task_event') AND NOT EXISTS (
                SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)
            """
        ).fetchall()
        for name, _ in indexes:
            pg.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        # Spread over the last ~day (inside the retention period, so the watchdog keeps them).
        pg.execute(
            """
            INSERT INTO tf_task (id, queue_id, payload, status, priority, scheduled_at, created_at, updated_at,
                                 status_changed_at, claimed_at, claimed_by, lease_token, attempts, max_retries,
                                 finished_at)
            SELECT gen_random_uuid(), %(queue_id)s, '{"bench": "history"}'::jsonb, 'done', 1 + g %% 10, ts, ts,
                   ts + interval '1 second', ts + interval '1 second', ts + interval '500 ms', 'history-worker',
                   md5(g::text), 1, 3, ts + interval '1 second'
            FROM generate_series(1, %(n)s) AS g,
                 LATERAL (SELECT now() - interval '1 day' + g * (interval '1 day' / %(n)s) - interval '1 hour' AS ts) s
            """,
            {"queue_id": queue_id, "n": cfg.w6_history},
        )
        pg.execute(
            """
            INSERT INTO tf_task_event (task_id, queue_id, kind, at, from_status, to_status, worker_id)
            SELECT id, queue_id, 'transition', finished_at, 'executing', 'done', claimed_by
            FROM tf_task WHERE queue_id = %s AND status = 'done'
            """,
            [queue_id],
        )
        for _, definition in indexes:
            # A partitioned table's index reads "ON ONLY <table>" in pg_indexes: built that way it
            # would cover no partition (and stay invalid); without ONLY it is built on every one.
            pg.execute(definition.replace(" ON ONLY ", " ON ", 1))
        pg.execute("VACUUM (ANALYZE) tf_task")
        pg.execute("VACUUM (ANALYZE) tf_task_event")
        (rows,) = pg.execute("SELECT count(*) FROM tf_task").fetchone()
    ctx.extra["w6_setup_seconds"] = round(time.perf_counter() - began, 1)
    print(f"    {rows:,} finished tasks (+ their done events) inserted in {ctx.extra['w6_setup_seconds']}s", flush=True)


def measure_reference(ctx: Context) -> None:
    """W3's drain again, once per run, just before the history goes in: what W6 is compared with.

    W3's own runs come twenty minutes earlier, and a shared machine's speed drifts over
    that time by more than the history could move a drain; these come a minute before W6's.
    """
    rates = []
    for run in range(ctx.cfg.runs):
        result = w3_batch(ctx, run)
        ctx.figures.add("W6", REFERENCE_RATE, result["rate"])
        rates.append(result["rate"])
    ctx.extra["w6_reference_rates"] = rates


def w6(ctx: Context, run: int) -> None:
    cfg = ctx.cfg
    # No reset: the history stays; earlier runs' drained tasks join it.
    result = _drain(ctx, "W6", HISTORY_QUEUE, ctx.extra["queue_ids"][HISTORY_QUEUE], cfg.w3_tasks, ctx.worker_kind)
    ctx.figures.add("W6", "drain tasks/s over finished history", result["rate"])
    reference = ctx.extra.get("w6_reference_rates", [])
    if run < len(reference):
        ctx.figures.add("W6", "W6 / W3", result["rate"] / reference[run])


def define(ctx: Context) -> None:
    f = ctx.figures
    history = f"{ctx.cfg.w6_history:,}"
    processes, threads = ctx.cfg.worker_processes, ctx.cfg.naive_threads
    f.define("W3", "drain tasks/s (batch)", "tasks/s", (">=", 4500))
    f.define("W3", "drain tasks/s incl. worker start", "tasks/s")
    f.define("W3", "API CPU per task (batch)", "ms")
    f.define("W3", "worker CPU per task (batch)", "ms", note="reference worker processes, incl. start-up")
    f.define("W3", "Celery drain tasks/s (prefork -c 2)", "tasks/s")
    f.define("W3", "Celery drain tasks/s incl. worker start", "tasks/s")
    f.define("W3", "Celery worker CPU per task", "ms", note="celery master + pool processes, incl. start-up")
    f.define("W3", "TaskForge / Celery drain", "x", (">=", 3))
    f.define("W3N", NAIVE_RATE, "tasks/s", (">=", 1000), note=f"{processes} processes x {threads} threads")
    f.define("W3N", "API CPU per task (naive)", "ms", note="a claim and an ack per task")
    f.define("W3D", DEFAULTS_RATE, "tasks/s", (">=", 3000), note=f"{processes} processes, flags: --queue --handler")
    f.define("W3D", "drain tasks/s incl. worker start (defaults)", "tasks/s")
    f.define("W3D", "API CPU per task (defaults)", "ms")
    f.define("W3D", "worker CPU per task (defaults)", "ms", note="incl. start-up and its default INFO log lines")
    f.define("W3K", REFERENCE_RATE, "tasks/s", note="W3's drain, in each run just before W3K's")
    f.define("W3K", TASKS_RATE, "tasks/s", note="W3's flags, tasks by kind through bench.app_tasks")
    f.define("W3K", "API CPU per task (reference)", "ms")
    f.define("W3K", "worker CPU per task (reference)", "ms")
    f.define("W3K", "API CPU per task (@app.task)", "ms")
    f.define("W3K", "worker CPU per task (@app.task)", "ms")
    f.define("W3K", "W3K / W3", "x", (">=", 0.9), note="each run over its own reference drain")
    f.define("W3b", "end-to-end tasks/s", "tasks/s", (">=", 3000))
    f.define("W3b", "producer tasks/s (while draining)", "tasks/s")
    f.define("W6", REFERENCE_RATE, "tasks/s", note="W3's drain, each run just before the history is loaded")
    f.define("W6", "drain tasks/s over finished history", "tasks/s", note=f"{history} finished tasks present")
    f.define("W6", "W6 / W3", "x", (">=", 0.9), note="each run over the reference run of the same number")


def setup(ctx: Context) -> None:
    ctx.extra.setdefault("queue_ids", {})
    for name in ("bench_w3", HISTORY_QUEUE):
        ctx.extra["queue_ids"][name] = ctx.create_queue(name)
