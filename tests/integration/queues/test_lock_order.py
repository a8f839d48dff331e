"""Every statement that locks a set of dead or waiting tasks locks them in id order.

Two moves that lock the same rows in different orders can deadlock (a DLQ
discard against a bulk replay, say). Each statement asks for ``ORDER BY t.id``
right before its ``FOR UPDATE``, and Postgres honours it: the plan locks rows
coming out of a sort on the id, or out of an index scan that yields id order.
"""

from __future__ import annotations

import re
import uuid

import pytest
from django.db import connection

from queues.lifecycle import bulk_statements, statements

PARAMS = {
    "queue_id": uuid.uuid4(),
    "task_ids": [uuid.uuid4(), uuid.uuid4()],
    "limit": 1000,
    "detail": "x",
    "event_kind": "transition",
}

ID_ORDERED = {
    "DISCARD": statements.DISCARD,
    "REPLAY_SOME": statements.REPLAY_SOME,
    "REPLAY_ALL": statements.REPLAY_ALL,
    "RETRY_NOW": statements.RETRY_NOW,
    "PURGE_BATCH": bulk_statements.PURGE_BATCH,
}
# Indexes whose order is the task id (the primary key, and the partial index of dead tasks).
ID_INDEXES = ("tf_task_pkey", "tf_task_dead")


@pytest.mark.parametrize("name", sorted(ID_ORDERED))
def test_each_locking_statement_asks_for_id_order(name: str) -> None:
    sql = ID_ORDERED[name]
    locks = re.findall(r"(ORDER BY [^\n]+\n(?:\s*LIMIT [^\n]+\n)?)?\s*FOR UPDATE", sql)
    assert locks and all(lock.startswith("ORDER BY t.id") for lock in locks), name


def _plan(sql: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (COSTS OFF) {sql}", PARAMS)
        return [row[0].strip().removeprefix("->").strip() for row in cursor.fetchall()]


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(ID_ORDERED))
def test_the_plan_locks_rows_in_id_order(name: str) -> None:
    plan = _plan(ID_ORDERED[name])
    for i, line in enumerate(plan):
        if not line.startswith("LockRows"):
            continue
        rest = plan[i + 1 :]
        first_scan = next(step for step in rest if "Scan" in step or step.startswith("Sort"))
        if first_scan.startswith("Sort"):
            assert rest[rest.index(first_scan) + 1] == "Sort Key: t.id", "\n".join(plan)
        else:
            assert any(f"using {index} on tf_task" in first_scan for index in ID_INDEXES), "\n".join(plan)
