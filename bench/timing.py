"""W4 (enqueue-to-start latency at a steady low rate) and W5 (lateness of delayed tasks).

The workers run the ``stamp`` handler, which returns the wall-clock time it
started; the worker acks with it as the task's ``result``. Latency is
``started - (time the enqueue request was sent)``; lateness is
``started - scheduled_at``. Everything runs on one machine, so the harness,
the workers and Postgres share one clock. Postgres' own view (``claimed_at``
minus ``created_at`` / ``scheduled_at``) is recorded next to it.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from bench import wakeups
from bench.context import Context
from bench.figures import percentile

SETTLE_SECONDS = 2.0


def _starts(ctx: Context, ids: list[str]) -> dict[str, dict[str, Any]]:
    with ctx.stack.connect() as pg:
        rows = pg.execute(
            """
            SELECT t.id::text, (t.result ->> 'started')::float8, extract(epoch FROM t.created_at)::float8,
                   extract(epoch FROM t.claimed_at)::float8, extract(epoch FROM t.scheduled_at)::float8
            FROM tf_task t WHERE t.id = ANY(%s::uuid[])
            """,
            [ids],
        ).fetchall()
    return {r[0]: {"started": r[1], "created": r[2], "claimed": r[3], "scheduled": r[4]} for r in rows}


def w4(ctx: Context, run: int) -> None:
    cfg = ctx.cfg
    ctx.stack.reset_state()
    queue_id = ctx.extra["queue_ids"]["bench_w4"]
    workers = ctx.start_workers("bench_w4", stamp=True, label="w4")
    time.sleep(SETTLE_SECONDS)  # idle and long-polling before the first task

    async def produce() -> dict[str, float]:
        conn = ctx.connection("producer")
        sent: dict[str, float] = {}
        begin = time.perf_counter()
        try:
            for n in range(cfg.w4_tasks):
                delay = begin + n / cfg.w4_rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                at = time.time()
                task = await conn.json("POST", "/queues/bench_w4/tasks", {"payload": {"n": n}}, expect=(201,))
                sent[task["id"]] = at
        finally:
            conn.close()
        return sent

    sent = asyncio.run(produce())
    ctx.wait_drained(queue_id, workers, cfg.drain_timeout)
    ctx.stop_workers(workers)
    ctx.check_exactly_once("W4", list(sent))
    starts = _starts(ctx, list(sent))
    latencies = [(starts[i]["started"] - at) * 1000 for i, at in sent.items() if starts[i]["started"] is not None]
    if len(latencies) < len(sent):
        raise RuntimeError("W4: the worker did not store the stamp handler's result")
    dispatch = [(s["claimed"] - s["created"]) * 1000 for s in starts.values()]
    # Where the time goes (one machine, one clock): the enqueue request until the row
    # exists, the wake-up and claim, then the answer's way to the handler.
    before_row = [(starts[i]["created"] - at) * 1000 for i, at in sent.items()]
    to_handler = [(s["started"] - s["claimed"]) * 1000 for s in starts.values()]
    ctx.figures.add("W4", "enqueue-to-start p50", percentile(latencies, 50))
    ctx.figures.add("W4", "enqueue-to-start p99", percentile(latencies, 99))
    ctx.figures.add("W4", "created-to-claimed p99 (Postgres clock)", percentile(dispatch, 99))
    ctx.figures.add("W4", "sent-to-created p50", percentile(before_row, 50))
    ctx.figures.add("W4", "created-to-claimed p50", percentile(dispatch, 50))
    ctx.figures.add("W4", "claimed-to-start p50", percentile(to_handler, 50))
    # The machine's own floor for the same trickle, measured with the stack idle (workers stopped).
    for service, trips in (
        ("Postgres", wakeups.postgres(ctx.stack.database_url)),
        ("Redis", wakeups.redis_server(ctx.stack.redis_url)),
    ):
        ctx.figures.add("W4", f"{service} round trip back to back p50", trips.back_to_back_ms)
        ctx.figures.add("W4", f"{service} round trip after 50 ms idle p50", trips.after_idle_ms)


def enqueue_due_over(ctx: Context, workload: str, queue: str, count: int, seconds: float) -> dict[str, float]:
    """Enqueue ``count`` tasks due uniformly over the next ``seconds`` (after a lead time), in batches
    of 100; return once the last is due, with each task's id and due time (Unix seconds)."""
    lead = 2.0 + count / 400  # enqueueing them all takes well under this, even on a busy machine
    first_due = time.time() + lead
    due = [first_due + seconds * n / count for n in range(count)]

    async def produce() -> dict[str, float]:
        conn = ctx.connection("producer")
        wanted: dict[str, float] = {}
        try:
            for start in range(0, len(due), 100):
                chunk = due[start : start + 100]
                body = {"tasks": [{"payload": {"due": at}, "scheduled_at": iso(at)} for at in chunk]}
                created = await conn.json("POST", f"/queues/{queue}/tasks/batch", body, expect=(201,))
                for task, at in zip(created["tasks"], chunk, strict=True):
                    wanted[task["id"]] = at
        finally:
            conn.close()
        return wanted

    wanted = asyncio.run(produce())
    if time.time() > first_due:
        ctx.note(workload, "enqueueing took longer than the lead time: early tasks were enqueued late")
    time.sleep(max(0.0, first_due + seconds - time.time()))
    return wanted


def w5(ctx: Context, run: int) -> None:
    cfg = ctx.cfg
    ctx.stack.reset_state()
    queue_id = ctx.extra["queue_ids"]["bench_w5"]
    workers = ctx.start_workers("bench_w5", stamp=True, label="w5")
    time.sleep(SETTLE_SECONDS)
    wanted = enqueue_due_over(ctx, "W5", "bench_w5", cfg.w5_tasks, cfg.w5_seconds)
    ctx.wait_drained(queue_id, workers, cfg.drain_timeout)
    ctx.stop_workers(workers)
    ctx.check_exactly_once("W5", list(wanted))
    starts = _starts(ctx, list(wanted))
    lateness = [(starts[i]["started"] - at) * 1000 for i, at in wanted.items()]
    ctx.figures.add("W5", "lateness p50", percentile(lateness, 50))
    ctx.figures.add("W5", "lateness p99", percentile(lateness, 99))
    ctx.figures.add("W5", "earliest start vs due", min(lateness))


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")


def define(ctx: Context) -> None:
    f = ctx.figures
    f.define("W4", "enqueue-to-start p50", "ms", ("<=", 3))
    f.define("W4", "enqueue-to-start p99", "ms", ("<=", 15))
    f.define("W4", "created-to-claimed p99 (Postgres clock)", "ms")
    f.define("W4", "sent-to-created p50", "ms", note="the enqueue request until its row exists")
    f.define("W4", "created-to-claimed p50", "ms", note="doorbell, wake-up and claim")
    f.define("W4", "claimed-to-start p50", "ms", note="the claim's answer until the handler runs")
    for service, probe in (("Postgres", "SELECT 1"), ("Redis", "PING")):
        f.define("W4", f"{service} round trip back to back p50", "ms", note=f"{probe} from the harness")
        f.define(
            "W4",
            f"{service} round trip after 50 ms idle p50",
            "ms",
            note=f"{probe} from the harness, each after W4's interval asleep (bench/wakeups.py)",
        )
    f.define("W5", "lateness p50", "ms")
    f.define("W5", "lateness p99", "ms", ("<=", 50))
    f.define("W5", "earliest start vs due", "ms", (">=", 0), note="negative: a task started before it was due")


def setup(ctx: Context) -> None:
    for name in ("bench_w4", "bench_w5"):
        ctx.extra["queue_ids"][name] = ctx.create_queue(name)
