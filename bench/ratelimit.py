"""W7: a queue limited to 50 tasks/s, drained by 20 greedy workers for 20 seconds.

Dispatch times are the ``claimed`` events in Postgres. The bucket starts full,
so the first second may dispatch ``burst`` tasks on top of the rate: the mean
is taken after that (from 2 s in to the end), and the largest count in any
1-second window over the whole run must stay within ``rate + burst``.
"""

from __future__ import annotations

import asyncio
import time

from bench.context import Context

STEADY_AFTER_SECONDS = 2.0


def largest_window(times: list[float], width: float = 1.0) -> int:
    """The most events in any half-open window ``[t, t + width)``."""
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - width:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def w7(ctx: Context, run: int) -> None:
    cfg = ctx.cfg
    ctx.stack.reset_state()
    queue_id = ctx.extra["queue_ids"]["bench_w7"]
    ctx.preload("bench_w7", int(cfg.w7_rate * cfg.w7_seconds * 1.5) + cfg.w7_rate)

    async def greedy(n: int, until: float) -> None:
        conn = ctx.connection("worker")
        worker_id = f"w7-greedy-{n}"
        claim = {"worker_id": worker_id, "queue": "bench_w7", "max_tasks": 10, "wait_seconds": 1}
        try:
            while time.time() < until:
                tasks = (await conn.json("POST", "/workers/claim", claim))["tasks"]
                if tasks:
                    items = [{"task_id": t["id"], "lease_token": t["lease_token"]} for t in tasks]
                    await conn.json("POST", "/workers/ack/batch", {"worker_id": worker_id, "items": items})
        finally:
            conn.close()

    async def swarm() -> tuple[float, float]:
        start = time.time()
        until = start + cfg.w7_seconds
        await asyncio.gather(*(greedy(n, until) for n in range(cfg.w7_workers)))
        return start, until

    start, end = asyncio.run(swarm())
    with ctx.stack.connect() as pg:
        times = [
            float(at)
            for (at,) in pg.execute(
                "SELECT extract(epoch FROM at)::float8 FROM tf_task_event "
                "WHERE queue_id = %s AND to_status = 'claimed' ORDER BY at",
                [queue_id],
            ).fetchall()
        ]
    inside = [t for t in times if start <= t < end]
    steady = [t for t in inside if t >= start + STEADY_AFTER_SECONDS]
    ctx.figures.add("W7", "mean dispatches/s (steady)", len(steady) / (end - start - STEADY_AFTER_SECONDS))
    ctx.figures.add("W7", "largest 1-second window", largest_window(inside))
    ctx.figures.add("W7", "tasks dispatched", len(inside))


def define(ctx: Context) -> None:
    rate = ctx.cfg.w7_rate
    f = ctx.figures
    f.define("W7", "mean dispatches/s (steady)", "tasks/s", ("within", (rate * 0.98, rate * 1.02)))
    f.define("W7", "largest 1-second window", "tasks", ("<=", rate * 2), note="limit: rate + burst (burst = rate)")
    f.define("W7", "tasks dispatched", "tasks")


def setup(ctx: Context) -> None:
    ctx.extra["queue_ids"]["bench_w7"] = ctx.create_queue("bench_w7", rate_limit=ctx.cfg.w7_rate)
