"""The claim statements' plans stay cheap with a backlog, even before Postgres has fresh statistics.

A burst of enqueues is exactly when the planner's statistics lag behind and
when claims matter most: a claim by id must probe the primary key once per id,
and a one-queue claim must stop its ordered scan at the LIMIT, instead of
reading every due pending task of the queue. The lease that follows updates
the picked rows through the primary key, whatever the planner guessed of how
many there would be, with fresh statistics and without, and with the generic
plan a prepared statement settles on.
"""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings
from django.db import connection, transaction

from queues import lifecycle
from queues.lifecycle import claim_statements
from queues.lifecycle.rows import fetch_rows
from taskforge.infra.postgres import aio
from tests.factories import QueueFactory
from tests.integration.queues.loop import kept_plan, run

pytestmark = pytest.mark.django_db(transaction=True)  # the tasks are committed, never analysed

BACKLOG = 5_000


@pytest.fixture
def backlog():  # type: ignore[no-untyped-def]
    queue = QueueFactory(name="backlog")
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO tf_task (id, queue_id, payload, status, priority, scheduled_at, created_at, updated_at,
                                 status_changed_at, attempts, max_retries)
            SELECT gen_random_uuid(), %s, '{}'::jsonb, 'pending', 5, now() - interval '1 second' * g,
                   now(), now(), now(), 0, 3
            FROM generate_series(1, %s) g
            """,
            [queue.id, BACKLOG],
        )
        cursor.execute("SELECT id FROM tf_task WHERE queue_id = %s ORDER BY scheduled_at DESC LIMIT 50", [queue.id])
        ids = [row[0] for row in cursor.fetchall()]
    return queue, ids


def _plan(sql: str, params: dict) -> str:
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        try:
            cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {sql}", params)
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("ROLLBACK")


def _params(queue, ids: list[uuid.UUID]) -> dict:  # type: ignore[no-untyped-def]
    return {
        "queue_id": queue.id,
        "queue_ids": [queue.id],
        "task_ids": ids,
        "limit": 50,
        "worker_id": "plan",
        "lease_seconds": settings.TASKFORGE_HEARTBEAT_TIMEOUT,
        "event_kind": "transition",
    }


def _picked_rows(plan: str) -> list[int]:
    """Rows each scan of tf_task produced while picking (before the update)."""
    picked = plan.split("CTE moved")[0]
    return [
        int(line.split("rows=")[1].split()[0])
        for line in picked.splitlines()
        if "Scan" in line and "on tf_task" in line and "rows=" in line
    ]


def test_a_claim_by_id_probes_the_primary_key_once_per_id(backlog):
    queue, ids = backlog
    plan = _plan(claim_statements.CLAIM_BY_IDS_FROM_ONE_QUEUE, _params(queue, ids))
    assert "tf_task_pkey" in plan.split("CTE moved")[0], plan
    assert max(_picked_rows(plan)) <= 1, plan  # one row per probe, never the backlog


def test_a_claim_by_id_across_several_queues_still_probes_once_per_id(backlog):
    queue, ids = backlog
    other = QueueFactory(name="other")
    plan = _plan(claim_statements.CLAIM_BY_IDS_FROM_QUEUES, {**_params(queue, ids), "queue_ids": [queue.id, other.id]})
    assert "tf_task_pkey" in plan.split("CTE moved")[0], plan
    assert max(_picked_rows(plan)) <= 1, plan


def test_a_one_queue_claim_stops_its_ordered_scan_at_the_limit(backlog):
    queue, _ = backlog
    plan = _plan(claim_statements.CLAIM_FROM_ONE_QUEUE, _params(queue, []))
    assert max(_picked_rows(plan)) <= 50, plan


def test_a_topped_up_claim_probes_its_ids_and_stops_its_scan_at_the_limit(backlog):
    queue, ids = backlog
    params = {**_params(queue, ids[:10]), "scan_queue_id": queue.id, "scan_queue_ids": [queue.id]}
    plan = _plan(claim_statements.CLAIM_BY_IDS_TOPPED_UP_FROM_ONE_QUEUE, params)
    proposed, scanned = plan.split("CTE moved")[0].split("CTE scanned")
    assert "tf_task_pkey" in proposed, plan
    assert max(_picked_rows(proposed)) <= 1, plan
    assert max(_picked_rows(scanned)) <= 50, plan  # the 40 the ids left, plus the 10 ids it skips


def test_a_topped_up_claim_takes_its_ids_then_the_oldest_others(backlog):
    queue, ids = backlog
    moved = lifecycle.claim("w-plan", [queue.id], 50, task_ids=ids[:10], scan_queue_ids=[queue.id])
    assert len(moved) == 50
    assert set(ids[:10]) <= {row["id"] for row in moved}
    others = sorted(row["scheduled_at"] for row in moved if row["id"] not in ids[:10])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT scheduled_at FROM tf_task WHERE queue_id = %s AND status = 'pending' ORDER BY scheduled_at LIMIT 1",
            [queue.id],
        )
        (next_pending,) = cursor.fetchone()
    assert others[-1] <= next_pending  # the 40 oldest of the rest, none skipped over


def test_the_claims_themselves_take_the_tasks_in_order(backlog):
    queue, ids = backlog
    by_id = lifecycle.claim("w-plan", [queue.id], 50, task_ids=ids)
    assert {row["id"] for row in by_id} == set(ids)
    scanned = lifecycle.claim("w-plan", [queue.id], 50)
    assert len(scanned) == 50
    oldest_first = [row["scheduled_at"] for row in scanned]
    assert oldest_first == sorted(oldest_first)
    assert not {row["id"] for row in scanned} & set(ids)


# Every claim variant, with the parameters it reads.
VARIANTS = {
    "CLAIM_FROM_ONE_QUEUE": {},
    "CLAIM_FROM_QUEUES": {},
    "CLAIM_BY_IDS_FROM_ONE_QUEUE": {"ids": 10},
    "CLAIM_BY_IDS_FROM_QUEUES": {"ids": 10},
    "CLAIM_BY_IDS_TOPPED_UP_FROM_ONE_QUEUE": {"ids": 10},
    "CLAIM_BY_IDS_TOPPED_UP_FROM_QUEUES": {"ids": 10},
    "CLAIM_BY_ONE_ID_FROM_ONE_QUEUE": {"ids": 1},
    "CLAIM_BY_ONE_ID_TOPPED_UP_FROM_ONE_QUEUE": {"ids": 1},
}


def _variant_params(queue, ids: list[uuid.UUID], name: str) -> dict:  # type: ignore[no-untyped-def]
    proposed = ids[: VARIANTS[name].get("ids", 0)]
    return {
        **_params(queue, proposed),
        "task_id": proposed[0] if proposed else None,
        "scan_queue_id": queue.id,
        "scan_queue_ids": [queue.id],
    }


@pytest.fixture
def analysed_backlog(backlog):  # type: ignore[no-untyped-def]
    """The backlog with statistics, and other queues' finished tasks beside it (kept for days)."""
    queue, ids = backlog
    finished = QueueFactory(name="finished")
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO tf_task (id, queue_id, payload, status, priority, scheduled_at, created_at, updated_at,
                                 status_changed_at, finished_at, attempts, max_retries)
            SELECT gen_random_uuid(), %s, '{}'::jsonb, 'done', 5, now(), now(), now(), now(), now(), 1, 3
            FROM generate_series(1, %s) g
            """,
            [finished.id, 3 * BACKLOG],
        )
        cursor.execute("ANALYZE tf_task")
    return queue, ids


def _sequential_scans_of_tasks() -> int:
    """Sequential scans of tf_task so far in this transaction (Postgres' own count, this session only)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_xact_user_tables WHERE relname = 'tf_task'")
        (scans,) = cursor.fetchone()
    return int(scans)


@pytest.mark.parametrize("plans", ["auto", "force_generic_plan"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_claim_never_reads_the_whole_task_table(analysed_backlog, name, plans):
    # With fresh statistics a LIMIT the planner cannot read (the top-up's, or any LIMIT of the generic
    # plan a prepared statement settles on) is guessed at a tenth of the queue: 500 picked rows here.
    # To lease those, the planner preferred reading all of tf_task (the backlog and every finished
    # task) and hashing it: 30-50 ms per claim at 80,000 tasks, and growing with the table.
    queue, ids = analysed_backlog
    sql = claim_statements.__dict__[name]
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL plan_cache_mode = {plans}")
        before = _sequential_scans_of_tasks()
        for run in range(3):  # prepared on the first run, then run again as a prepared statement runs
            assert fetch_rows(sql, _variant_params(queue, ids[run * 10 :], name))
        assert _sequential_scans_of_tasks() == before
        transaction.set_rollback(True)


# --- a claim of one id on the event loop: a plan Postgres keeps ------------------------------------


_PENDING_TASKS = """
    INSERT INTO tf_task (id, queue_id, payload, status, priority, scheduled_at, created_at, updated_at,
                         status_changed_at, attempts, max_retries)
    SELECT gen_random_uuid(), %s, '{}'::jsonb, 'pending', 5, now(), now(), now(), now(), 0, 3
    FROM generate_series(1, %s) RETURNING id
"""


@pytest.mark.parametrize("scan", [False, True], ids=["by-id", "topped-up"])
def test_a_loop_claim_of_one_id_keeps_its_plan_and_the_plan_never_reads_the_whole_table(settings, scan):
    # Made while tf_task is nearly empty and analysed so (where reading the table beats any index),
    # then kept while a backlog arrives without fresh statistics: a burst of enqueues after a quiet
    # start. The loop's connections never choose a sequential scan, so the kept plan still probes
    # the primary key (without that, 23-25 ms per claim at 50,000 tasks, in a scratch measure).
    settings.DB_LOOP_POOL_SIZE = 1  # one connection: every claim below runs on it
    queue = QueueFactory(name="kept-plan")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE tf_task")
        cursor.execute(_PENDING_TASKS, [queue.id, 8])
        first = [row[0] for row in cursor.fetchall()]
    sql, _ = lifecycle.lease.claim_statement("w", [queue.id], 1, first[:1], [queue.id] if scan else (), plan_kept=True)

    async def scenario() -> tuple[int, str]:
        for task_id in first:  # prepared on its first run; from the sixth on, Postgres keeps one plan
            (row,) = await lifecycle.claim_on_loop("w", queue, 1, task_ids=[task_id], scan=scan)
            assert row["id"] == task_id
        pool = await aio.pool()
        async with pool.connection() as conn:
            backlog = [row[0] for row in await (await conn.execute(_PENDING_TASKS, [queue.id, BACKLOG])).fetchall()]
        (row,) = await lifecycle.claim_on_loop("w", queue, 1, task_ids=[backlog[-1]], scan=scan)
        assert row["id"] == backlog[-1]
        # The kept plan, as the next claim of one id would run it.
        _, params = lifecycle.lease.claim_statement(
            "w", [queue.id], 1, backlog[:1], [queue.id] if scan else (), plan_kept=True
        )
        return await kept_plan(sql, params)

    generic, plan = run(scenario)
    assert generic >= 1  # the plan was kept, not made again on each run
    picking = plan.split("CTE moved")[0]
    assert "Seq Scan on tf_task" not in plan and "Bitmap Heap Scan" not in picking, plan
    assert "tf_task_pkey" in picking.split("CTE scanned")[0], plan  # the id, probed
    if scan:  # the rest in the index's order (no sort of every due task), so the scan stops at the LIMIT
        scanned = picking.split("CTE scanned")[1]
        assert "Index Scan using" in scanned and "Sort" not in scanned, plan
