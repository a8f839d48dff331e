"""W9: push throughput. A backlog of a push queue delivered by ``run_pusher`` to a local receiver that
answers 200 at once (``bench.push_receiver``), with the stack's one pusher and then with two.

The rate is Postgres' word, as for the drains: first ``claimed`` to last ``done`` event of the
run's tasks, each of which must be done exactly once. Claim to ack per delivery (the pusher's
request and its recording) is reported as p50/p99.

Then, with the two pushers still running, ``w9_due_tasks`` tasks come due uniformly over
``w9_due_seconds`` (enqueued ahead with ``scheduled_at``, as W5's), and each is timed from its due
time to its ``done`` event: the delivery answered 200 and recorded, on Postgres' clock.
"""

from __future__ import annotations

import time
import uuid

from bench.context import Context
from bench.procs import Child
from bench.timing import enqueue_due_over
from taskforge.dev import launcher

QUEUE = "bench_w9"
# The queue's own limit is not what is measured: each pusher's TASKFORGE_PUSHER_CONCURRENCY is.
PUSHERS = (1, 2)
#: How long a pusher may take to boot (Django's setup and checks) before the backlog is loaded.
START_TIMEOUT_SECONDS = 60.0


def _rate(pushers: int) -> str:
    return f"push tasks/s ({pushers} pusher{'s' * (pushers > 1)})"


def define(ctx: Context) -> None:
    f = ctx.figures
    f.define("W9", _rate(1), "tasks/s", note="first claimed to last done event")
    f.define("W9", _rate(2), "tasks/s", (">=", 2000), note="first claimed to last done event")
    f.define("W9", "claim-to-ack p50 (2 pushers)", "ms")
    f.define("W9", "claim-to-ack p99 (2 pushers)", "ms")
    f.define("W9", "due-to-delivered p50 (2 pushers)", "ms", note="scheduled_at to the done event")
    f.define("W9", "due-to-delivered p99 (2 pushers)", "ms", note="scheduled_at to the done event")


def setup(ctx: Context) -> None:
    port = launcher.free_port()
    ctx.extra["w9_receiver"] = ctx.supervisor.spawn(
        "push-receiver", [ctx.stack.python, "-m", "bench.push_receiver", str(port)], ctx.stack.env()
    )
    push = {"url": f"http://127.0.0.1:{port}/", "max_concurrent": 1000, "timeout_seconds": 30}
    ctx.extra["queue_ids"][QUEUE] = ctx.create_queue(QUEUE, push=push)


def w9(ctx: Context, run: int) -> None:
    cfg = ctx.cfg
    queue_id = ctx.extra["queue_ids"][QUEUE]
    extra = []
    for pushers in PUSHERS:
        ctx.stack.reset_state()
        while len(extra) < pushers - 1:  # the stack runs one pusher already
            loop = launcher.loop("run_pusher", python=ctx.stack.python)
            extra.append(ctx.supervisor.spawn(f"pusher-{len(extra) + 2}", loop.argv, loop.environ(ctx.stack.env())))
        for child in extra:
            # A backlog loaded while a pusher still boots is drained by the others alone.
            _wait_started(child)
        ids = ctx.preload(QUEUE, cfg.w9_tasks)
        ctx.wait_drained(queue_id, extra, cfg.drain_timeout)
        ctx.check_exactly_once("W9", ids)
        rate, p50, p99 = _measured(ctx, queue_id)
        ctx.figures.add("W9", _rate(pushers), rate)
        if pushers == 2:
            ctx.figures.add("W9", "claim-to-ack p50 (2 pushers)", p50)
            ctx.figures.add("W9", "claim-to-ack p99 (2 pushers)", p99)
    p50, p99 = _due_to_delivered(ctx, queue_id, extra)
    ctx.figures.add("W9", "due-to-delivered p50 (2 pushers)", p50)
    ctx.figures.add("W9", "due-to-delivered p99 (2 pushers)", p99)
    for child in extra:
        ctx.supervisor.stop(child)


def _due_to_delivered(ctx: Context, queue_id: uuid.UUID, pushers: list[Child]) -> tuple[float, float]:
    """Tasks due uniformly over a window, delivered by the running pushers: due time to done, p50/p99."""
    cfg = ctx.cfg
    # No reset here: after a Redis flush every queue's push slots stay closed for a few seconds
    # (queues.push.semaphore.SETTLE_MS), which this would measure instead of the wake-up.
    ids = list(enqueue_due_over(ctx, "W9", QUEUE, cfg.w9_due_tasks, cfg.w9_due_seconds))
    ctx.wait_drained(queue_id, pushers, cfg.drain_timeout)
    ctx.check_exactly_once("W9", ids)
    with ctx.stack.connect() as pg:
        (p50, p99) = pg.execute(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) "
            "FROM (SELECT extract(epoch FROM d.at - t.scheduled_at) * 1000 AS ms FROM tf_task t "
            "JOIN tf_task_event d ON d.task_id = t.id AND d.to_status = 'done' "
            "WHERE t.id = ANY(%s::uuid[])) per_task",
            [ids],
        ).fetchone()
    return float(p50), float(p99)


def _wait_started(child: Child) -> None:
    """Until the loop logged its start (``loop.start``, at INFO: the bench's level)."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while '"loop.start"' not in child.tail(100_000):
        if not child.alive() or time.monotonic() > deadline:
            raise RuntimeError(
                f"{child.name} logged no loop.start (INFO) within {START_TIMEOUT_SECONDS:.0f} s: {child.tail()}"
            )
        time.sleep(0.2)


def _measured(ctx: Context, queue_id: uuid.UUID) -> tuple[float, float, float]:
    with ctx.stack.connect() as pg:
        (first, last, done) = pg.execute(
            "SELECT min(at) FILTER (WHERE to_status = 'claimed'), max(at) FILTER (WHERE to_status = 'done'), "
            "count(*) FILTER (WHERE to_status = 'done') FROM tf_task_event WHERE queue_id = %s",
            [queue_id],
        ).fetchone()
        (p50, p99) = pg.execute(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) "
            "FROM (SELECT extract(epoch FROM d.at - c.at) * 1000 AS ms FROM tf_task_event d "
            "JOIN tf_task_event c ON c.task_id = d.task_id AND c.to_status = 'claimed' "
            "WHERE d.queue_id = %s AND d.to_status = 'done') per_task",
            [queue_id],
        ).fetchone()
    return done / max((last - first).total_seconds(), 1e-6), float(p50), float(p99)
