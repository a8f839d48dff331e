"""W8: one producer enqueues one task at a time, as fast as it can, while two worker
processes at their defaults drain; beside it Celery, Huey and PgQueuer doing the same.

The figure is end-to-end: tasks done during the producer's window, per second
of it. For TaskForge that is the ``done`` events in Postgres (an ack after the
handler ran); for each peer, its no-op handler's own count in Redis (see
``bench.peer``). After the window every task enqueued must run exactly once.
"""

from __future__ import annotations

from bench import default_worker, peer, peers
from bench.context import Context
from bench.single_producer import run_taskforge_producer

QUEUE = "bench_w8"
RATE = "end-to-end tasks/s (1 producer, 2 workers at defaults)"
#: Each task's enqueue, its share of the claims and acks, and the bells: W0's figure beside it is the enqueue alone.
API_CPU = "API CPU per task (enqueue, claim, ack)"
PEER_WORKERS = {
    "Celery": "prefork -c 2",
    "Huey": "-k process -w 2",
    "PgQueuer": "2 x pgq run",
}


def done_between(ctx: Context, started: float, ended: float) -> int:
    """Tasks of W8's queue acked in ``[started, ended)`` (wall-clock seconds; one machine, one clock)."""
    with ctx.stack.connect() as pg:
        (done,) = pg.execute(
            "SELECT count(*) FROM tf_task_event WHERE queue_id = %s AND to_status = 'done' "
            "AND at >= to_timestamp(%s) AND at < to_timestamp(%s)",
            [ctx.extra["queue_ids"][QUEUE], started, ended],
        ).fetchone()
    return done


def w8(ctx: Context, run: int) -> None:
    rate = w8_taskforge(ctx, run)

    def record(name: str, measured: peer.Trickle) -> None:
        ctx.figures.add("W8", _peer_rate(name), measured.rate)
        ctx.figures.add("W8", f"TaskForge / {name} end-to-end", rate / measured.rate)

    peers.measure_each(
        ctx,
        "W8",
        run,
        lambda each: peer.trickle(each, ctx.supervisor, ctx.cfg.w8_seconds, ctx.cfg.drain_timeout),
        record,
        lambda name, reason: _skip_peer(ctx, name, reason),
    )


def w8_taskforge(ctx: Context, run: int) -> float:
    """TaskForge's part of W8 (profiled on its own, without the peers): its end-to-end rate."""
    cfg = ctx.cfg
    ctx.stack.reset_state()
    queue_id = ctx.extra["queue_ids"][QUEUE]
    workers = default_worker.start(ctx, QUEUE, processes=cfg.worker_processes, label="w8")
    # One task first: once it is done, both workers are up and long-polling.
    warmup_id = ctx.preload(QUEUE, 1)
    ctx.wait_drained(queue_id, workers, peer.READY_TIMEOUT_SECONDS)
    ctx.begin_measure()
    api_cpu = ctx.stack.api_cpu_seconds()
    window, ids, _ = run_taskforge_producer(ctx, QUEUE, cfg.w8_seconds)
    done = done_between(ctx, window.started, window.ended)
    ctx.wait_drained(queue_id, workers, cfg.drain_timeout)
    api_cpu = ctx.stack.api_cpu_seconds() - api_cpu
    ctx.stop_workers(workers)
    ctx.check_exactly_once("W8", warmup_id + ids)
    rate = done / window.seconds
    ctx.figures.add("W8", RATE, rate)
    ctx.figures.add("W8", "producer tasks/s (while draining)", window.rate)
    ctx.figures.add("W8", API_CPU, api_cpu * 1000 / len(ids))
    return rate


def _peer_rate(name: str) -> str:
    return f"{name} end-to-end tasks/s ({PEER_WORKERS[name]})"


def _skip_peer(ctx: Context, name: str, reason: str) -> None:
    for figure in (_peer_rate(name), f"TaskForge / {name} end-to-end"):
        ctx.figures.skip("W8", figure, reason)


def define(ctx: Context) -> None:
    f = ctx.figures
    f.define("W8", RATE, "tasks/s", (">=", 1000), note="done events during the producer's window")
    f.define("W8", "producer tasks/s (while draining)", "tasks/s")
    f.define(
        "W8",
        API_CPU,
        "ms",
        note="user+system CPU of the gunicorn workers from the producer's start to the drain's end / tasks",
    )
    for name in PEER_WORKERS:
        f.define("W8", _peer_rate(name), "tasks/s", note="its handler's count during the producer's window")
        # TaskForge must at least keep up with Celery in the same run.
        f.define("W8", f"TaskForge / {name} end-to-end", "x", (">=", 1.0) if name == "Celery" else None)


def setup(ctx: Context) -> None:
    ctx.extra["queue_ids"][QUEUE] = ctx.create_queue(QUEUE)
