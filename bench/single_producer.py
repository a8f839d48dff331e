"""W0: one sequential producer, one task per call, through TaskForge's own Python client;
beside it, Celery's, Huey's and PgQueuer's single-producer enqueue in the same run.

TaskForge's producer runs with the project's interpreter (``python -m
bench.sequential``), where the client lives; the peers' producers run in the
harness. Nobody drains during W0: each queue is emptied afterwards.
"""

from __future__ import annotations

import subprocess

from bench import peer, peers, sequential
from bench.context import Context
from bench.figures import percentile
from bench.procs import ROOT

QUEUE = "bench_w0"
RATE = "enqueue tasks/s (Python client, 1 producer)"
CLIENT_CPU = "producer CPU per enqueue: TaskForgeClient"
BARE_CPU = "producer CPU per enqueue: bare httpx"
OVERHEAD = "client overhead over bare httpx"
RATIO_TARGETS: dict[str, tuple[str, float] | None] = {"Celery": (">=", 0.6), "Huey": None, "PgQueuer": (">=", 0.6)}


def run_taskforge_producer(
    ctx: Context, queue: str, seconds: float, *, overhead: bool = False
) -> tuple[sequential.Window, list[str], dict | None]:
    """TaskForge's client enqueues one task per request, back to back, from its own process.

    With ``overhead``, the producer then also measures the client's own CPU
    per call against a bare httpx request (``sequential.client_overhead``).
    """
    env = ctx.stack.env(TASKFORGE_API_URL=ctx.stack.api_url, TASKFORGE_API_KEY=ctx.stack.keys["producer"])
    argv = [ctx.stack.python, "-m", "bench.sequential", "--queue", queue, "--seconds", str(seconds)]
    if overhead:
        argv.append("--overhead")
    timeout = seconds + sequential.WARMUP_SECONDS + 120
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the sequential producer failed:\n{done.stderr[-3000:]}")
    return sequential.from_json(done.stdout.strip().splitlines()[-1])


def w0(ctx: Context, run: int) -> None:
    cfg = ctx.cfg
    ctx.stack.reset_state()
    api_cpu = ctx.stack.api_cpu_seconds()
    window, ids, overhead = run_taskforge_producer(ctx, QUEUE, cfg.w0_seconds, overhead=True)
    api_cpu = ctx.stack.api_cpu_seconds() - api_cpu
    _check_stored(ctx, len(ids))
    ctx.figures.add("W0", RATE, window.rate)
    ctx.figures.add("W0", "enqueue p50", percentile(window.latencies_ms, 50))
    ctx.figures.add("W0", "enqueue p99", percentile(window.latencies_ms, 99))
    ctx.figures.add("W0", "API CPU per task", api_cpu * 1000 / len(ids))  # the overhead rounds' enqueues too
    assert overhead is not None
    ctx.figures.add("W0", CLIENT_CPU, overhead["client_cpu_ms"])
    ctx.figures.add("W0", BARE_CPU, overhead["bare_cpu_ms"])
    ctx.figures.add("W0", OVERHEAD, overhead["overhead_ms"])

    def record(name: str, peer_window: sequential.Window) -> None:
        ctx.figures.add("W0", f"{name} enqueue tasks/s (1 producer)", peer_window.rate)
        ctx.figures.add("W0", f"{name} enqueue p99", percentile(peer_window.latencies_ms, 99))
        ctx.figures.add("W0", f"TaskForge / {name} enqueue", window.rate / peer_window.rate)

    peers.measure_each(
        ctx,
        "W0",
        run,
        lambda each: peer.enqueue_window(each, cfg.w0_seconds),
        record,
        lambda name, reason: _skip_peer(ctx, name, reason),
    )


def _skip_peer(ctx: Context, name: str, reason: str) -> None:
    for figure in (f"{name} enqueue tasks/s (1 producer)", f"{name} enqueue p99", f"TaskForge / {name} enqueue"):
        ctx.figures.skip("W0", figure, reason)


def _check_stored(ctx: Context, answered: int) -> None:
    """Every enqueue the client saw answered is a row in Postgres."""
    with ctx.stack.connect() as pg:
        (stored,) = pg.execute(
            "SELECT count(*) FROM tf_task t JOIN tf_queue q ON q.id = t.queue_id WHERE q.name = %s", [QUEUE]
        ).fetchone()
    if stored != answered:
        raise RuntimeError(f"{QUEUE}: {answered} enqueues answered but {stored} tasks are stored")


def define(ctx: Context) -> None:
    f = ctx.figures
    f.define("W0", RATE, "tasks/s", (">=", 1200), note="one request at a time, warm-up excluded")
    f.define("W0", "enqueue p50", "ms")
    f.define("W0", "enqueue p99", "ms", ("<=", 3))
    f.define("W0", "API CPU per task", "ms", note="user+system CPU of the gunicorn workers / requests")
    rounds = f"{sequential.OVERHEAD_ROUNDS} rounds of {sequential.OVERHEAD_CALLS}, alternating"
    f.define("W0", CLIENT_CPU, "ms", note=rounds)
    f.define("W0", BARE_CPU, "ms", note="the same POST with httpx.Client, JSON decoded")
    f.define("W0", OVERHEAD, "ms", ("<=", 0.15), note="difference of the two medians")
    for name, target in RATIO_TARGETS.items():
        f.define("W0", f"{name} enqueue tasks/s (1 producer)", "tasks/s")
        f.define("W0", f"{name} enqueue p99", "ms")
        f.define("W0", f"TaskForge / {name} enqueue", "x", target)


def setup(ctx: Context) -> None:
    ctx.extra["queue_ids"][QUEUE] = ctx.create_queue(QUEUE)
