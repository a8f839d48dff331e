"""The history's partitions, measured: the online conversion, retention by dropping a day, and tf_task.

``python -m bench.partitions`` (``make bench-partitions``), with the project's
interpreter, on the Postgres server of ``DATABASE_URL``, in a database of its
own (``taskforge_partitions_bench``: created, and dropped at the end):

1. **Conversion.** A plain ``tf_task_event`` (migrations up to 0009) holding
   ``--convert-rows`` events (1,000,000) from the last week is converted by
   migration 0010 while a writer inserts events and a reader reads histories.
2. **Retention.** ``--retention-rows`` events (10,000,000) in one day past
   retention are dropped by a maintenance round (``queues.partitions``), with
   the same writer and reader; for comparison, the events of 20,000 tasks of
   that day are first deleted the old way (by task id, in batches of 1,000).
   Then the reads that cannot skip partitions by time (a task's history, the
   per-minute rates) are planned and run over the partitions and over one
   plain table holding the same 1,000,000 events.
3. **Finished tasks.** Whether ``tf_task`` would gain from partitioning:
   ``prune_finished`` batches on ``--task-rows`` finished tasks (1,000,000),
   and a primary-key probe (the claim's) on the plain table and on a copy
   partitioned by day.

Every figure is printed, and written as JSON to ``bench/results/partitions/<time>.json``:
each statement's duration, the longest any write or read waited while it
ran, and the ACCESS EXCLUSIVE locks on ``tf_task_event``'s tables seen in
``pg_locks`` (sampled every few milliseconds) with how long each was held.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from bench.alongside import alongside, quiet_baseline, statement_timings

ROOT = Path(__file__).resolve().parents[1]
DATABASE = "taskforge_partitions_bench"
DAY = timedelta(days=1)
EVENTS_PER_TASK = 5
LOAD_CHUNK = 500_000
PARTS = ("conversion", "retention", "reads", "tasks")


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def load_events(dsn: str, rows: int, first_at: datetime, span: timedelta, queue_id: uuid.UUID) -> uuid.UUID:
    """``rows`` events, EVENTS_PER_TASK per task, spread evenly over ``span`` from ``first_at``; one task id."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        done = 0
        while done < rows:
            chunk = min(LOAD_CHUNK, rows - done)
            conn.execute(
                """
                INSERT INTO tf_task_event (task_id, queue_id, kind, at, from_status, to_status, worker_id)
                SELECT md5(%(seed)s || (g / %(per_task)s)::text)::uuid, %(queue)s, 'transition',
                       %(first)s + %(span)s * (g::float8 / %(rows)s), 'claimed', 'done', 'bench-worker'
                FROM generate_series(%(start)s::bigint, %(stop)s::bigint) AS g
                """,
                {
                    "seed": str(first_at),
                    "per_task": EVENTS_PER_TASK,
                    "queue": queue_id,
                    "first": first_at,
                    "span": span,
                    "rows": rows,
                    "start": done,
                    "stop": done + chunk - 1,
                },
            )
            done += chunk
            print(f"    {done:,} / {rows:,} events loaded", flush=True)
        (task,) = conn.execute(
            "SELECT md5(%s || '7')::uuid", [str(first_at)]
        ).fetchone()  # the task of rows 35-39: the reader's
    return task  # type: ignore[no-any-return]


# --- 1. the conversion -----------------------------------------------------------------------------


def conversion(dsn: str, rows: int) -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connection

    print(f"1. conversion of a plain tf_task_event with {rows:,} events", flush=True)
    call_command("migrate", "queues", "0009_queue_push", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    reader_task = load_events(dsn, rows, now - 7 * DAY, 7 * DAY, uuid.uuid4())
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) tf_task_event")
        (size,) = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('tf_task_event'))").fetchone()
    logged: list[dict[str, Any]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(
                {"message": record.getMessage(), **{k: v for k, v in vars(record).items() if k == "lock_held_ms"}}
            )

    handler = Keep()
    logging.getLogger("taskforge.migrations").addHandler(handler)
    logging.getLogger("taskforge.migrations").setLevel(logging.INFO)
    statements: list[dict[str, Any]] = []
    baseline = quiet_baseline(dsn, reader_task)
    try:
        with alongside(dsn, reader_task) as report, statement_timings(statements):
            call_command("migrate", "queues", "0010_partition_task_events", verbosity=0)
    finally:
        logging.getLogger("taskforge.migrations").removeHandler(handler)
    report.update(rows=rows, table_size=size, migration_log=logged, statements=statements, baseline=baseline)
    return report


# --- 2. retention ----------------------------------------------------------------------------------


def retention(dsn: str, rows: int) -> dict[str, Any]:
    from django.db import connection

    from queues.partitions import catalog, maintain

    print(f"2. retention: a day of {rows:,} events past retention", flush=True)
    # Days from ten days ago, as a watchdog running since then would have made them: the
    # converted table and the rest go, rounds dated in the past build the days.
    for partition in reversed(catalog.read().partitions):
        with connection.cursor() as cursor:
            cursor.execute(f'DROP TABLE "{partition.name}"')
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    for days in range(10, -1, -1):  # a round a day, keeping everything until the measured one
        maintain.run_round(retention_days=30, now=now - days * DAY)
    # The oldest day, ten days back: the measured round drops it (and the two after it, empty),
    # and has nothing else to do.
    day = catalog.read().partitions[0]
    assert day.lower is not None and day.upper is not None
    reader_task = load_events(dsn, rows, day.lower, DAY - timedelta(microseconds=1), uuid.uuid4())
    load_events(dsn, 10_000, now - 2 * DAY, DAY, uuid.uuid4())  # recent history, kept
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'VACUUM (ANALYZE) "{day.name}"')
        (size,) = conn.execute(f"SELECT pg_size_pretty(pg_total_relation_size('\"{day.name}\"'))").fetchone()
        # The old way, for comparison: the events of 20,000 of that day's tasks, deleted by task id
        # in batches of 1,000 as the watchdog pruned them with their tasks.
        tasks = [t for (t,) in conn.execute(f'SELECT DISTINCT task_id FROM "{day.name}" LIMIT 20000').fetchall()]
        began = time.perf_counter()
        deleted = 0
        for start in range(0, len(tasks), 1000):
            deleted += conn.execute(
                "DELETE FROM tf_task_event WHERE task_id = ANY(%s)", [tasks[start : start + 1000]]
            ).rowcount
        delete_seconds = time.perf_counter() - began
    statements: list[dict[str, Any]] = []
    baseline = quiet_baseline(dsn, reader_task)
    with alongside(dsn, reader_task) as report, statement_timings(statements):
        done = maintain.run_round(retention_days=7)
    remaining = catalog.read().partitions
    report.update(
        rows=rows,
        day=day.name,
        day_size=size,
        dropped=list(done.dropped),
        created=list(done.created),
        bounded=done.bounded,
        day_gone=all(p.name != day.name for p in remaining),
        statements=statements,
        baseline=baseline,
        old_way={
            "events_deleted": deleted,
            "seconds": round(delete_seconds, 2),
            "extrapolated_seconds_for_the_day": round(delete_seconds * rows / max(deleted, 1), 1),
        },
    )
    return report


# --- 2b. reads that cannot skip partitions by time -----------------------------------------------

READS = {
    "a task's history": "SELECT * FROM {table} WHERE task_id = %(task)s ORDER BY at, id",
    "per-minute rates": (
        "SELECT count(*) FILTER (WHERE to_status = 'done') FROM {table}"
        " WHERE queue_id = %(queue)s AND kind = 'transition' AND at > now() - interval '60 seconds'"
    ),
}


def reads(dsn: str, rows: int = 1_000_000, runs: int = 60) -> dict[str, Any]:
    """Planning and execution of the history's reads: the partitioned table against one plain table.

    Statements are not prepared (Django does not prepare them), so each run is planned, and
    a query that cannot skip partitions by ``at`` at planning time plans every one.
    """
    from queues.partitions import catalog

    print(f"2b. reads over {len(catalog.read().partitions)} partitions and over one table, {rows:,} events", flush=True)
    queue_id = uuid.uuid4()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE tf_task_event")
        (now,) = conn.execute("SELECT now()").fetchone()  # type: ignore[misc]
    task = load_events(dsn, rows, now - 7 * DAY, 7 * DAY, queue_id)
    figures: dict[str, Any] = {"partitions": len(catalog.read().partitions)}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE tf_task_event_plain AS SELECT * FROM tf_task_event")
        conn.execute("CREATE INDEX ON tf_task_event_plain (task_id, at)")
        conn.execute("CREATE INDEX ON tf_task_event_plain (queue_id, at)")
        conn.execute("VACUUM (ANALYZE) tf_task_event")
        conn.execute("VACUUM (ANALYZE) tf_task_event_plain")
        for label, template in READS.items():
            for table in ("tf_task_event", "tf_task_event_plain"):
                planning, execution = [], []
                for _ in range(runs):
                    (plan,) = conn.execute(  # type: ignore[misc]
                        "EXPLAIN (ANALYZE, SUMMARY, FORMAT JSON) " + template.format(table=table),
                        {"task": task, "queue": queue_id},
                    ).fetchone()
                    planning.append(plan[0]["Planning Time"])
                    execution.append(plan[0]["Execution Time"])
                warm = runs // 6  # the first runs fill the session's catalog caches
                figures[f"{label}, {table}"] = {
                    "planning_ms": round(statistics.median(planning[warm:]), 3),
                    "execution_ms": round(statistics.median(execution[warm:]), 3),
                }
        conn.execute("DROP TABLE tf_task_event_plain")
    return figures


# --- 3. finished tasks -----------------------------------------------------------------------------


def probe_by_id(conn: psycopg.Connection[Any], ids: list[uuid.UUID], rounds: int = 7) -> dict[str, Any]:
    """Primary-key probes on the plain and the partitioned table, taking turns; medians of ``rounds``."""
    tables = ("tf_task", "tf_task_by_day")
    # Many ids in one statement, as the claim by ids probes them (claim_statements.CLAIM_BY_IDS_*)...
    batch = (
        "SELECT count(*) FROM unnest(%s::uuid[]) AS wanted(id)"
        " CROSS JOIN LATERAL (SELECT 1 FROM {table} x WHERE x.id = wanted.id OFFSET 0) t"
    )
    # ...and one statement per id, as a single ack finds its task (planning included).
    single = "SELECT id, status FROM {table} WHERE id = %s FOR UPDATE"
    timings: dict[str, list[float]] = {f"{kind}, {table}": [] for kind in ("batch", "single") for table in tables}
    for _ in range(rounds + 1):  # the first round warms the caches and is not counted
        for table in tables:
            began = time.perf_counter()
            conn.execute(batch.format(table=table), [ids])
            timings[f"batch, {table}"].append((time.perf_counter() - began) / len(ids))
            began = time.perf_counter()
            with conn.transaction():
                for task_id in ids[:2000]:
                    conn.execute(single.format(table=table), [task_id])
            timings[f"single, {table}"].append((time.perf_counter() - began) / 2000)
    return {
        table: {
            "one_probe_in_a_batch_ms": round(statistics.median(timings[f"batch, {table}"][1:]) * 1000, 4),
            "one_statement_per_id_ms": round(statistics.median(timings[f"single, {table}"][1:]) * 1000, 4),
        }
        for table in tables
    }


def finished_tasks(dsn: str, rows: int) -> dict[str, Any]:
    from django.conf import settings

    from queues import lifecycle

    print(f"3. tf_task: {rows:,} finished tasks", flush=True)
    queue_id = uuid.uuid4()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tf_queue (id, name, max_retries, paused, retry_base_ms, retry_max_delay_ms, created_at,"
            " updated_at) VALUES (%s, 'bench-history', 3, false, 1000, 3600000, now(), now())",
            [queue_id],
        )
        # Eight days of finished tasks: the oldest day is past a retention of seven.
        conn.execute(
            """
            INSERT INTO tf_task (id, queue_id, payload, status, priority, scheduled_at, created_at, updated_at,
                                 status_changed_at, claimed_at, claimed_by, lease_token, attempts, max_retries,
                                 finished_at)
            SELECT gen_random_uuid(), %(queue)s, '{"bench": "history"}'::jsonb, 'done', 1 + g %% 10, ts, ts, ts, ts,
                   ts, 'bench-worker', md5(g::text), 1, 3, ts + interval '1 second'
            FROM generate_series(1, %(rows)s) AS g,
                 LATERAL (SELECT now() - interval '8 days' + g * (interval '8 days' / %(rows)s) AS ts) s
            """,
            {"queue": queue_id, "rows": rows},
        )
        conn.execute("VACUUM (ANALYZE) tf_task")
        ids = [i for (i,) in conn.execute("SELECT id FROM tf_task ORDER BY random() LIMIT 20000").fetchall()]
        # The same rows partitioned by day on created_at, its primary key (id, created_at) as it must be.
        conn.execute("CREATE TABLE tf_task_by_day (LIKE tf_task INCLUDING DEFAULTS) PARTITION BY RANGE (created_at)")
        conn.execute("ALTER TABLE tf_task_by_day ADD PRIMARY KEY (id, created_at)")
        (first,) = conn.execute("SELECT date_trunc('day', min(created_at)) FROM tf_task").fetchone()
        for offset in range(10):
            lower = first + offset * DAY
            conn.execute(
                f"CREATE TABLE tf_task_by_day_{offset} PARTITION OF tf_task_by_day"
                f" FOR VALUES FROM ('{lower.isoformat()}') TO ('{(lower + DAY).isoformat()}')"
            )
        conn.execute("INSERT INTO tf_task_by_day SELECT * FROM tf_task")
        conn.execute("VACUUM (ANALYZE) tf_task_by_day")
        try:
            conn.execute("CREATE UNIQUE INDEX ON tf_task_by_day (queue_id, idempotency_key)")
            idempotency = "accepted"
        except psycopg.Error as exc:
            idempotency = str(exc).splitlines()[0]
        probes = probe_by_id(conn, ids)
    batches = []
    settings.TASKFORGE_RETENTION_DAYS = 7
    began = time.perf_counter()
    while True:
        started = time.perf_counter()
        pruned = lifecycle.prune_finished(1000)
        if not pruned:
            break
        batches.append(time.perf_counter() - started)
    total = time.perf_counter() - began
    return {
        "rows": rows,
        "probe_by_id_ms": probes,
        "unique_idempotency_key_on_partitioned": idempotency,
        "prune": {
            "batches": len(batches),
            "seconds": round(total, 2),
            "batch_p50_ms": round(statistics.median(batches) * 1000, 1) if batches else None,
            "batch_max_ms": round(max(batches) * 1000, 1) if batches else None,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--convert-rows", type=int, default=1_000_000)
    parser.add_argument("--retention-rows", type=int, default=10_000_000)
    parser.add_argument("--task-rows", type=int, default=1_000_000)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to measure")
    args = parser.parse_args()
    server = os.environ.get("DATABASE_URL")
    if not server:
        raise SystemExit("DATABASE_URL must name a Postgres server this script may create a database on")
    admin_dsn = _with_database(server, "postgres")
    dsn = _with_database(server, DATABASE)
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    os.environ.update(DATABASE_URL=dsn, TASKFORGE_DB_POOL_SIZE="0", DJANGO_LOG_LEVEL="WARNING")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "taskforge.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-not-secret")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    results: dict[str, Any] = {"started": datetime.now(UTC).isoformat()}
    try:
        with psycopg.connect(dsn) as conn:
            results["postgres"] = conn.execute("SELECT version()").fetchone()[0]  # type: ignore[index]
        if "conversion" in args.parts:
            results["conversion"] = conversion(dsn, args.convert_rows)
            print(json.dumps(results["conversion"], indent=2), flush=True)
        call_command("migrate", verbosity=0)
        if "retention" in args.parts:
            results["retention"] = retention(dsn, args.retention_rows)
            print(json.dumps(results["retention"], indent=2), flush=True)
        if "reads" in args.parts:
            results["reads"] = reads(dsn)
            print(json.dumps(results["reads"], indent=2), flush=True)
        if "tasks" in args.parts:
            results["finished_tasks"] = finished_tasks(dsn, args.task_rows)
            print(json.dumps(results["finished_tasks"], indent=2), flush=True)
    finally:
        connections.close_all()
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    out = ROOT / "bench" / "results" / "partitions" / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
