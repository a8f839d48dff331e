"""W1 (one task per request, 16 keep-alive clients) and W2 (100 tasks per request)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.context import Context
from bench.figures import percentile

WARMUP_SECONDS = 1.0


async def _hammer(ctx: Context, path: str, body: Any, clients: int, seconds: float) -> dict[str, Any]:
    """``clients`` connections send ``body`` back to back; only the window after the warm-up counts."""
    started = time.perf_counter()
    window_start = started + WARMUP_SECONDS
    window_end = window_start + seconds
    latencies: list[float] = []
    errors: list[str] = []
    answered = 0

    async def client() -> None:
        conn = ctx.connection("producer")
        try:
            while True:
                sent = time.perf_counter()
                if sent >= window_end:
                    return
                status, data = await conn.request("POST", path, body)
                nonlocal answered
                answered += 1
                if sent >= window_start:
                    if status == 201:
                        latencies.append(time.perf_counter() - sent)
                    else:
                        errors.append(f"HTTP {status}: {data[:200]!r}")
        finally:
            conn.close()

    cpu_before = ctx.stack.api_cpu_seconds()
    await asyncio.gather(*(client() for _ in range(clients)))
    cpu = ctx.stack.api_cpu_seconds() - cpu_before
    return {"latencies": latencies, "errors": errors, "seconds": seconds, "answered": answered, "api_cpu": cpu}


def w1(ctx: Context, run: int) -> None:
    cfg = ctx.cfg
    ctx.stack.reset_state()
    ctx.begin_measure()
    outcome = asyncio.run(_hammer(ctx, "/queues/bench_w1/tasks", {"payload": {"n": 1}}, cfg.w1_clients, cfg.w1_seconds))
    _fail_on_errors(ctx, "W1", outcome)
    latencies = outcome["latencies"]
    ctx.figures.add("W1", "enqueue tasks/s", len(latencies) / outcome["seconds"])
    ctx.figures.add("W1", "enqueue p50", percentile(latencies, 50) * 1000)
    ctx.figures.add("W1", "enqueue p99", percentile(latencies, 99) * 1000)
    ctx.figures.add("W1", "API CPU per task", outcome["api_cpu"] * 1000 / outcome["answered"])
    _check_stored(ctx, "bench_w1", len(latencies))


def w2(ctx: Context, run: int) -> None:
    cfg = ctx.cfg
    ctx.stack.reset_state()
    body = {"tasks": [{"payload": {"n": n}} for n in range(cfg.w2_batch)]}
    ctx.begin_measure()
    outcome = asyncio.run(_hammer(ctx, "/queues/bench_w2/tasks/batch", body, cfg.w2_clients, cfg.w2_seconds))
    _fail_on_errors(ctx, "W2", outcome)
    latencies = outcome["latencies"]
    ctx.figures.add("W2", "batch enqueue tasks/s", len(latencies) * cfg.w2_batch / outcome["seconds"])
    ctx.figures.add("W2", "batch request p50", percentile(latencies, 50) * 1000)
    ctx.figures.add("W2", "API CPU per task", outcome["api_cpu"] * 1000 / (outcome["answered"] * cfg.w2_batch))
    _check_stored(ctx, "bench_w2", len(latencies) * cfg.w2_batch)


def define(ctx: Context) -> None:
    f = ctx.figures
    f.define("W1", "enqueue tasks/s", "tasks/s", (">=", 2500))
    f.define("W1", "enqueue p50", "ms")
    f.define("W1", "enqueue p99", "ms", ("<=", 25))
    f.define("W1", "API CPU per task", "ms", ("<=", 0.4), note="user+system CPU of the gunicorn workers / requests")
    f.define("W2", "batch enqueue tasks/s", "tasks/s", (">=", 15000))
    f.define("W2", "batch request p50", "ms")
    f.define("W2", "API CPU per task", "ms")


def setup(ctx: Context) -> None:
    ctx.create_queue("bench_w1")
    ctx.create_queue("bench_w2")


def _fail_on_errors(ctx: Context, workload: str, outcome: dict[str, Any]) -> None:
    if outcome["errors"]:
        raise RuntimeError(f"{workload}: {len(outcome['errors'])} failed request(s), e.g. {outcome['errors'][0]}")


def _check_stored(ctx: Context, queue: str, at_least: int) -> None:
    """Every 201 must be a row in Postgres (requests finished in the warm-up add more)."""
    with ctx.stack.connect() as pg:
        (stored,) = pg.execute(
            "SELECT count(*) FROM tf_task t JOIN tf_queue q ON q.id = t.queue_id WHERE q.name = %s", [queue]
        ).fetchone()
    if stored < at_least:
        raise RuntimeError(f"{queue}: {at_least} enqueues answered 201 but only {stored} tasks are stored")
