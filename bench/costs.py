"""CAP: what one task costs, process by process, and the capacity model checked on this machine.

Every stage runs under a :class:`bench.meter.Meter`, which counts CPU time of
every process involved, the bench database's WAL and commits, and Redis
commands (on a Redis server of the harness's own: ``BENCH_DEDICATED_REDIS=1``).

1. **enqueue**: ``cap_tasks`` tasks enqueued 100 per request, nobody claiming.
   Then the Redis lane's bytes per entry and the bench DB's Redis footprint, and
   ``tf_task`` + ``tf_task_event`` (tables, indexes, TOAST) per pending task.
2. The same tasks drained (not metered), then the tables per done task as they
   stand and after ``VACUUM FULL``; **vacuum**: a plain ``VACUUM`` of both
   tables after another drain, as autovacuum would run it; **prune**: their
   ``finished_at`` moved back past the retention period, the running watchdog
   deletes them.
3. **saturated**: the batch form of the whole lifecycle (the W3b shape: enqueue
   100 per request while the reference workers claim in batches of up to 100
   and ack in batches) with ``cap_producers`` connections enqueueing back to
   back; its rate is first enqueue to last ack, from Postgres.
4. **batch**: the same paced at ``cap_pace`` (half) of that rate: the unit
   costs of an operating point with headroom. **The check**: from this run's
   CPU per task and the cores the rest of the machine left during the
   saturated run, the model (``bench.capacity``) predicts the saturated run's
   rate.
5. **single**: the single-call form over ``calls_clients`` connections, each
   enqueueing one task, claiming one (``max_tasks`` 1) and acking it, in turn.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from typing import Any

import psycopg

from bench import capacity
from bench.context import Context
from bench.meter import Meter, Reading
from bench.procs import ROOT, Child
from bench.single_calls import split

QUEUE = "bench_cap"
WORKLOAD = "CAP"
BATCH = 100
SETTLE_SECONDS = 2.0  # workers up and long-polling before a metered stage begins
LANE_SETTLE_SECONDS = 5.0  # the dispatcher tops a lane up once a second
VACUUM_APPLICATION = "bench-vacuum"  # not the harness's name: the meter counts this backend

STAGES = {
    "idle": "nothing to do, 2 workers long-polling",
    "enqueue": "enqueue only, 100 per request, nobody claiming",
    "prune": "the watchdog's prune of done tasks past retention",
    "vacuum": "VACUUM of tf_task and tf_task_event after a drain",
    "saturated": "lifecycle, batch form, as fast as it goes",
    "batch": "lifecycle, batch form, paced",
    "single": "lifecycle, single calls",
}
# Per-task figures every metered stage records (name, unit, note).
CPU_FIGURES = (
    ("API CPU per task", "api", "gunicorn workers"),
    ("Postgres CPU per task", "postgres", "backends of the bench database, autovacuum included"),
    ("Redis CPU per task", "redis", "the dedicated redis-server"),
    ("loops CPU per task", "loops", "scheduler, dispatcher, watchdog, pusher"),
    ("worker CPU per task", "workers", "reference workers, after start-up"),
    ("load generator CPU per task", "load generator", "the harness process"),
)
WORKER_STAGES = ("batch", "saturated")


def _name(stage: str, figure: str) -> str:
    return f"{stage}: {figure}"


# --- producing -------------------------------------------------------------------------------


async def _produce(ctx: Context, count: int, *, connections: int, rate: float | None) -> list[str]:
    """``count`` tasks in batches of 100 over ``connections``; paced at ``rate`` tasks/s when given."""
    batches = [min(BATCH, count - start) for start in range(0, count, BATCH)]
    pending = list(enumerate(batches))
    ids: list[str] = []
    began = time.perf_counter()

    async def client() -> None:
        conn = ctx.connection("producer")
        try:
            while pending:
                index, size = pending.pop(0)
                if rate is not None:
                    delay = began + index * BATCH / rate - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                body = {"tasks": [{"payload": {"n": index * BATCH + n}} for n in range(size)]}
                created = await conn.json("POST", f"/queues/{QUEUE}/tasks/batch", body, expect=(201,))
                ids.extend(task["id"] for task in created["tasks"])
        finally:
            conn.close()

    await asyncio.gather(*(client() for _ in range(max(1, connections))))
    return ids


def produce(ctx: Context, count: int, *, connections: int = 1, rate: float | None = None) -> list[str]:
    return asyncio.run(_produce(ctx, count, connections=connections, rate=rate))


# --- what Postgres and Redis hold -------------------------------------------------------------


def table_bytes(ctx: Context) -> int:
    """tf_task and tf_task_event with their indexes and TOAST."""
    with ctx.stack.connect() as pg:
        (size,) = pg.execute(
            "SELECT pg_total_relation_size('tf_task') + pg_total_relation_size('tf_task_event')"
        ).fetchone()
    return int(size)


def redis_footprint(ctx: Context, lane_floor: int) -> dict[str, int]:
    """Once the dispatcher has topped the lane up to ``lane_floor`` ids: its bytes, its ids, and
    every key of the bench DB (``MEMORY USAGE``: exact for this DB even on a shared server)."""
    client = ctx.stack.redis()
    lane = f"tf:{{{QUEUE}}}:ready"
    deadline = time.monotonic() + LANE_SETTLE_SECONDS
    while client.zcard(lane) < lane_floor and time.monotonic() < deadline:
        time.sleep(0.1)
    keys = list(client.scan_iter(count=1000))
    return {
        "lane_entries": int(client.zcard(lane)),
        "lane_bytes": int(client.memory_usage(lane, samples=0) or 0),
        "keys": len(keys),
        "all_bytes": sum(int(client.memory_usage(key, samples=0) or 0) for key in keys),
    }


def compacted_bytes(ctx: Context, passes: int = 3) -> int:
    """The tables after ``VACUUM FULL``, repeated while it still shrinks them: row versions that a
    running snapshot (an autovacuum ANALYZE, a loop's statement) could still see are kept by one pass."""
    size = table_bytes(ctx)
    with ctx.stack.connect() as pg:
        for _ in range(passes):
            pg.execute("VACUUM FULL tf_task, tf_task_event")
            smaller = table_bytes(ctx)
            if smaller >= size:
                break
            size = smaller
            time.sleep(1.0)
    return size


def batch_sizes(ctx: Context, queue_id: uuid.UUID) -> tuple[float, float]:
    """Tasks per claim and per ack batch: events of one statement share its worker and now()."""
    with ctx.stack.connect() as pg:
        row = pg.execute(
            """
            SELECT count(*) FILTER (WHERE to_status = 'claimed')::float8
                       / nullif(count(DISTINCT (worker_id, at)) FILTER (WHERE to_status = 'claimed'), 0),
                   count(*) FILTER (WHERE to_status = 'done')::float8
                       / nullif(count(DISTINCT (worker_id, at)) FILTER (WHERE to_status = 'done'), 0)
            FROM tf_task_event WHERE queue_id = %s
            """,
            [queue_id],
        ).fetchone()
    return float(row[0] or 0.0), float(row[1] or 0.0)


# --- recording a reading ----------------------------------------------------------------------


def per_task(reading: Reading, tasks: int) -> dict[str, float | None]:
    """A reading as the model's unit costs: CPU in µs per task, bytes and counts per task."""
    cpu = dict(reading.cpu)
    cpu["loops"] = sum(seconds for group, seconds in reading.cpu.items() if group.startswith("run_"))
    costs: dict[str, float | None] = {
        group: (cpu[group] * 1e6 / tasks if group in cpu else None) for _, group, _ in CPU_FIGURES
    }
    wal = reading.database_wal
    costs["wal bytes"] = None if wal is None else wal.bytes / tasks
    costs["full-page bytes"] = None if wal is None else wal.full_page_bytes / tasks
    costs["commits"] = None if wal is None else wal.commits / tasks
    calls, scripts = reading.redis_calls(), reading.redis_scripts()
    costs["redis commands"] = None if calls is None else calls / tasks
    costs["redis scripts"] = None if scripts is None else scripts / tasks
    return costs


def record(ctx: Context, stage: str, gross: Reading, tasks: int, idle: Reading) -> dict[str, float | None]:
    """The stage's figures per task, with what the stack spends idle over as long subtracted."""
    reading = gross.beyond(idle)
    costs = per_task(reading, tasks)
    f = ctx.figures
    for figure, group, _ in CPU_FIGURES:
        if group == "workers" and stage not in WORKER_STAGES:
            continue
        value = costs[group]
        if value is None:
            f.skip(WORKLOAD, _name(stage, figure), "shared Redis server: run with BENCH_DEDICATED_REDIS=1")
        else:
            f.add(WORKLOAD, _name(stage, figure), value)
    for figure, key, scale in (
        ("WAL bytes per task", "wal bytes", 1),
        ("WAL full-page image bytes per task", "full-page bytes", 1),
        ("Postgres commits per 1,000 tasks", "commits", 1000),
        ("Redis commands per 1,000 tasks", "redis commands", 1000),
        ("Redis scripts per 1,000 tasks", "redis scripts", 1000),
    ):
        value = costs[key]
        if value is None:
            reason = "no pg_walinspect" if key in ("wal bytes", "full-page bytes", "commits") else "shared Redis server"
            f.skip(WORKLOAD, _name(stage, figure), reason)
        else:
            f.add(WORKLOAD, _name(stage, figure), value * scale)
    loops = ", ".join(
        f"{group.removeprefix('run_')} {seconds * 1e6 / tasks:.1f}"
        for group, seconds in sorted(reading.cpu.items())
        if group.startswith("run_")
    )
    server = f"server-wide WAL {reading.wal_bytes / tasks:,.0f} bytes/task (all databases)"
    background = reading.cpu.get("postgres background", 0.0) * 1e6 / tasks
    text = (
        f"{stage}: loops µs/task: {loops}; {server}; Postgres WAL writer+checkpointer+bgwriter {background:.1f} µs/task"
    )
    if reading.redis_commands:
        busiest = ", ".join(f"{name} {calls / tasks:.3f}" for name, calls in list(reading.redis_commands.items())[:8])
        text += f"; Redis commands/task: {busiest}"
    ctx.note(WORKLOAD, text)
    for note in reading.notes:
        ctx.note(WORKLOAD, f"{stage}: {note}")
    ctx.extra.setdefault("cap_readings", []).append(
        {"stage": stage, "tasks": tasks, "seconds": round(reading.seconds, 3), "per_task": costs}
    )
    return costs


# --- the stages -------------------------------------------------------------------------------


def _workers(ctx: Context, label: str) -> list[Child]:
    workers = ctx.start_workers(QUEUE, label=label)
    time.sleep(SETTLE_SECONDS)
    return workers


def _drain(ctx: Context, queue_id: uuid.UUID, label: str) -> None:
    workers = ctx.start_workers(QUEUE, label=label)
    ctx.wait_drained(queue_id, workers, ctx.cfg.drain_timeout)
    ctx.stop_workers(workers)


def idle_stage(ctx: Context) -> Reading:
    """What the stack spends with nothing to do: subtracted, scaled to their length, from the other stages."""
    ctx.stack.reset_state()
    workers = _workers(ctx, "cap-idle")
    meter = Meter(ctx.stack, {"workers": [child.pid for child in workers]}).start()
    time.sleep(ctx.cfg.cap_idle_seconds)
    idle = meter.stop()
    ctx.stop_workers(workers)
    costs = per_task(idle, 1)
    for figure, group, _ in CPU_FIGURES:
        value = costs[group]
        if value is None:
            ctx.figures.skip(WORKLOAD, _idle_name(figure), "shared Redis server: run with BENCH_DEDICATED_REDIS=1")
        else:
            ctx.figures.add(WORKLOAD, _idle_name(figure), value / 1000 / idle.seconds)
    calls = idle.redis_calls()
    if calls is None:
        ctx.figures.skip(WORKLOAD, "idle: Redis commands/s", "shared Redis server")
    else:
        ctx.figures.add(WORKLOAD, "idle: Redis commands/s", calls / idle.seconds)
    return idle


def _idle_name(figure: str) -> str:
    return _name("idle", figure.replace(" per task", ""))


def storage_stages(ctx: Context, queue_id: uuid.UUID, idle: Reading) -> None:
    """Enqueue (metered), what a task occupies in Redis and Postgres, then prune and vacuum (metered)."""
    count = ctx.cfg.cap_tasks
    ctx.stack.reset_state()
    empty = table_bytes(ctx)
    meter = Meter(ctx.stack).start()
    ids = produce(ctx, count)
    record(ctx, "enqueue", meter.stop(), len(ids), idle)
    redis = redis_footprint(ctx, min(count, capacity.LANE_CAPACITY))
    f = ctx.figures
    f.add(WORKLOAD, "Redis bytes per lane entry", redis["lane_bytes"] / max(1, redis["lane_entries"]))
    f.add(WORKLOAD, "Redis lane entries (of the backlog)", redis["lane_entries"])
    f.add(WORKLOAD, "Redis bytes, all keys of the bench DB", redis["all_bytes"])
    f.add(WORKLOAD, "Postgres bytes per pending task", (table_bytes(ctx) - empty) / count)

    _drain(ctx, queue_id, "cap-drain")
    ctx.check_exactly_once(WORKLOAD, ids)
    f.add(WORKLOAD, "Postgres bytes per done task", (table_bytes(ctx) - empty) / count)
    f.add(WORKLOAD, "Postgres bytes per done task, compacted", (compacted_bytes(ctx) - empty) / count)

    # Prune: done tasks older than TASKFORGE_RETENTION_DAYS (7) deleted as the watchdog does it.
    record(ctx, "prune", _prune(ctx, queue_id), count, idle)

    # Vacuum: a fresh set of tasks through the lifecycle, then what autovacuum would do after it.
    ctx.stack.reset_state()
    ids = produce(ctx, count)
    _drain(ctx, queue_id, "cap-drain")
    with psycopg.connect(ctx.stack.database_url, autocommit=True, application_name=VACUUM_APPLICATION) as pg:
        meter = Meter(ctx.stack).start()
        pg.execute("VACUUM tf_task, tf_task_event")
        record(ctx, "vacuum", meter.stop(), len(ids), idle)


def _prune(ctx: Context, queue_id: uuid.UUID) -> Reading:
    """The queue's done tasks moved past retention and pruned as the watchdog does it, metered.

    ``bench.prune`` starts Django before the tasks age, so the running watchdog
    (every 15 s) rarely gets there first; when it does, its backend is metered too.
    """
    argv = [ctx.stack.python, "-m", "bench.prune"]
    env = ctx.stack.env(DJANGO_LOG_LEVEL="WARNING")
    with subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("CAP: bench.prune did not start")
            with ctx.stack.connect() as pg:
                pg.execute(
                    "UPDATE tf_task SET finished_at = finished_at - interval '8 days' "
                    "WHERE queue_id = %s AND status = 'done'",
                    [queue_id],
                )
            meter = Meter(ctx.stack, {"run_watchdog (prune)": [proc.pid]}).start()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            proc.stdout.readline()
            reading = meter.stop()
        finally:
            proc.kill()
    with ctx.stack.connect() as pg:
        (left,) = pg.execute("SELECT count(*) FROM tf_task WHERE queue_id = %s", [queue_id]).fetchone()
    if left:
        raise RuntimeError(f"CAP: {left} done tasks past retention were not pruned")
    return reading


def batch_stage(
    ctx: Context, queue_id: uuid.UUID, stage: str, idle: Reading, rate: float | None = None
) -> dict[str, Any]:
    """The W3b shape under a meter: back to back (``saturated``) or paced at ``rate`` (``batch``)."""
    cfg = ctx.cfg
    ctx.stack.reset_state()
    workers = _workers(ctx, f"cap-{stage}")
    meter = Meter(ctx.stack, {"workers": [child.pid for child in workers]}).start()
    if rate is not None:
        ids = produce(ctx, cfg.cap_tasks, rate=rate)
    else:
        ids = produce(ctx, cfg.cap_tasks, connections=cfg.cap_producers)
    ctx.wait_drained(queue_id, workers, cfg.drain_timeout)
    reading = meter.stop()
    ctx.stop_workers(workers)
    outcome = ctx.check_exactly_once(WORKLOAD, ids)
    costs = record(ctx, stage, reading, len(ids), idle)
    claim, ack = batch_sizes(ctx, queue_id)
    f = ctx.figures
    f.add(WORKLOAD, _name(stage, "tasks per claim"), claim)
    f.add(WORKLOAD, _name(stage, "tasks per ack batch"), ack)
    measured = len(ids) / (outcome["last_done"] - outcome["first_created"])
    f.add(WORKLOAD, _name(stage, "end-to-end tasks/s"), measured)
    f.add(WORKLOAD, _name(stage, "busy cores, whole machine"), reading.machine_busy / reading.seconds)
    f.add(WORKLOAD, _name(stage, "cores the rest of the machine took"), reading.others / reading.seconds)
    return {"costs": costs, "reading": reading, "rate": measured}


async def _single_calls(ctx: Context, count: int, connections: int) -> int:
    """Each connection in turn enqueues one task, claims one (``max_tasks`` 1) and acks it; the claims made."""
    shares = [len(share) for share in split(list(range(count)), connections)]
    claims = 0

    async def client(n: int, tasks: int) -> None:
        nonlocal claims
        producer, worker = ctx.connection("producer"), ctx.connection("worker")
        claim = {"worker_id": f"cap-single-{n}", "queue": QUEUE, "max_tasks": 1, "wait_seconds": 1}
        try:
            for _ in range(tasks):
                await producer.json("POST", f"/queues/{QUEUE}/tasks", {"payload": {"n": n}}, expect=(201,))
                got: list[dict[str, Any]] = []
                while not got:  # another connection's claim may have taken the task just enqueued
                    got = (await worker.json("POST", "/workers/claim", claim))["tasks"]
                    claims += 1
                lease = {"worker_id": claim["worker_id"], "task_id": got[0]["id"], "lease_token": got[0]["lease_token"]}
                await worker.json("POST", "/workers/ack", lease)
        finally:
            producer.close()
            worker.close()

    await asyncio.gather(*(client(n, tasks) for n, tasks in enumerate(shares)))
    return claims


def single_stage(ctx: Context, queue_id: uuid.UUID, idle: Reading) -> None:
    """One enqueue, one claim of one task and one ack per task, under one meter."""
    count, connections = ctx.cfg.cap_single_tasks, ctx.cfg.calls_clients
    ctx.stack.reset_state()
    meter = Meter(ctx.stack).start()
    claims = asyncio.run(_single_calls(ctx, count, connections))
    reading = meter.stop()
    with ctx.stack.connect() as pg:
        (done,) = pg.execute(
            "SELECT count(*) FROM tf_task WHERE queue_id = %s AND status = 'done'", [queue_id]
        ).fetchone()
    if done != count:
        raise RuntimeError(f"CAP: {done} of {count} single-call tasks are done")
    record(ctx, "single", reading, count, idle)
    ctx.figures.add(WORKLOAD, "single: claims per task", claims / count)


def check(ctx: Context, idle: Reading, paced: dict[str, Any], saturated: dict[str, Any]) -> None:
    """The model's prediction of the saturated run's throughput, from the paced run, against the measure."""
    cores = float(os.cpu_count() or 1)
    cpu_us = capacity.machine_cpu_per_task(paced["costs"])
    fixed = capacity.machine_cpu_per_task(per_task(idle, 1)) / 1e6 / idle.seconds
    reading: Reading = saturated["reading"]
    left = cores - reading.others / reading.seconds
    predicted = capacity.throughput(left - fixed, cpu_us)
    f = ctx.figures
    f.add(WORKLOAD, "check: CPU per task, every process (paced run)", cpu_us)
    f.add(WORKLOAD, "check: cores the stack spends idle", fixed)
    f.add(WORKLOAD, "check: predicted tasks/s on all cores", capacity.throughput(cores - fixed, cpu_us))
    f.add(WORKLOAD, "check: predicted tasks/s on the cores left", predicted)
    f.add(WORKLOAD, "check: measured tasks/s (saturated)", saturated["rate"])
    f.add(WORKLOAD, "check: measured / predicted", saturated["rate"] / predicted)


def cap(ctx: Context, run: int) -> None:
    queue_id = ctx.extra["queue_ids"][QUEUE]
    idle = idle_stage(ctx)
    storage_stages(ctx, queue_id, idle)
    saturated = batch_stage(ctx, queue_id, "saturated", idle)
    paced = batch_stage(ctx, queue_id, "batch", idle, rate=ctx.cfg.cap_pace * saturated["rate"])
    check(ctx, idle, paced, saturated)
    single_stage(ctx, queue_id, idle)


def define(ctx: Context) -> None:
    f = ctx.figures
    cfg = ctx.cfg
    for figure, _, note in CPU_FIGURES:
        f.define(
            WORKLOAD, _idle_name(figure), "ms/s", note=f"{STAGES['idle']}; {note}" if figure.startswith("API") else note
        )
    f.define(WORKLOAD, "idle: Redis commands/s", "commands/s")
    for stage, what in STAGES.items():
        if stage == "idle":
            continue
        for figure, group, note in CPU_FIGURES:
            if group == "workers" and stage not in WORKER_STAGES:
                continue
            full = f"{what}; {note}; idle subtracted" if figure.startswith("API") else note
            f.define(WORKLOAD, _name(stage, figure), "µs", note=full)
        f.define(WORKLOAD, _name(stage, "WAL bytes per task"), "bytes", note="the bench database's records")
        f.define(WORKLOAD, _name(stage, "WAL full-page image bytes per task"), "bytes")
        f.define(WORKLOAD, _name(stage, "Postgres commits per 1,000 tasks"), "commits", note="each waits for a flush")
        f.define(WORKLOAD, _name(stage, "Redis commands per 1,000 tasks"), "commands", note="incl. those in scripts")
        f.define(WORKLOAD, _name(stage, "Redis scripts per 1,000 tasks"), "scripts")
        if stage in WORKER_STAGES:
            f.define(WORKLOAD, _name(stage, "tasks per claim"), "tasks")
            f.define(WORKLOAD, _name(stage, "tasks per ack batch"), "tasks")
            offered = f"paced at {cfg.cap_pace:.0%} of the saturated rate" if stage == "batch" else ""
            f.define(
                WORKLOAD,
                _name(stage, "end-to-end tasks/s"),
                "tasks/s",
                note=offered or f"{cfg.cap_producers} producers",
            )
            f.define(WORKLOAD, _name(stage, "busy cores, whole machine"), "cores", note="/proc/stat")
            f.define(
                WORKLOAD, _name(stage, "cores the rest of the machine took"), "cores", note="busy minus the stack's"
            )
    f.define(WORKLOAD, "single: claims per task", "claims", note="a claim may find its task taken by another")
    f.define(WORKLOAD, "Redis bytes per lane entry", "bytes", note="MEMORY USAGE of the lane / its ids")
    f.define(WORKLOAD, "Redis lane entries (of the backlog)", "ids", note=f"{cfg.cap_tasks:,} tasks pending")
    f.define(WORKLOAD, "Redis bytes, all keys of the bench DB", "bytes", note="one queue with its backlog")
    f.define(WORKLOAD, "Postgres bytes per pending task", "bytes", note="tf_task + tf_task_event, indexes, TOAST")
    f.define(WORKLOAD, "Postgres bytes per done task", "bytes", note="after the lifecycle, before any vacuum")
    f.define(WORKLOAD, "Postgres bytes per done task, compacted", "bytes", note="after VACUUM FULL")
    every = "API, Postgres, Redis, loops, workers, load generator"
    f.define(WORKLOAD, "check: CPU per task, every process (paced run)", "µs", note=every)
    f.define(WORKLOAD, "check: cores the stack spends idle", "cores", note="the idle stage, same processes")
    f.define(WORKLOAD, "check: predicted tasks/s on all cores", "tasks/s", note="(cores - idle) / CPU per task")
    left = "(cores the rest of the machine left - idle) / CPU per task"
    f.define(WORKLOAD, "check: predicted tasks/s on the cores left", "tasks/s", note=left)
    f.define(WORKLOAD, "check: measured tasks/s (saturated)", "tasks/s", note="first enqueue to last ack")
    f.define(WORKLOAD, "check: measured / predicted", "x", ("within", (0.8, 1.25)))


def setup(ctx: Context) -> None:
    ctx.extra["queue_ids"][QUEUE] = ctx.create_queue(QUEUE)
    if not ctx.cfg.wants(WORKLOAD):
        return
    # The bench database's share of the WAL is read with pg_walinspect (PostgreSQL 15+, superuser).
    try:
        with ctx.stack.connect() as pg:
            pg.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    except psycopg.Error as exc:
        ctx.note(WORKLOAD, f"no pg_walinspect, so no WAL figures per task: {exc}")
