"""Lifecycle statements run as prepared statements of their connection, except where they must not.

Observed on the real server: ``pg_prepared_statements`` lists what the
session has prepared, and its plan counters show a statement run again
without being parsed again. Behind a transaction-mode pooler
(``TASKFORGE_DB_PGBOUNCER``: psycopg's ``prepare_threshold`` None) and while
Django records queries, nothing is prepared and the statement still runs.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from queues import lifecycle
from queues.lifecycle.produce import NewTask
from queues.models import Queue

pytestmark = pytest.mark.django_db


def prepared_inserts() -> list[dict[str, Any]]:
    """This session's prepared task inserts and how often each ran.

    The session may be a pooled connection an earlier test already used, so
    the tests compare it before and after.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans + custom_plans AS runs FROM pg_prepared_statements"
            " WHERE statement LIKE '%%INSERT INTO tf_task %%'"
        )
        return [{"statement": statement, "runs": runs} for statement, runs in cursor.fetchall()]


def enqueue_one(queue: Queue) -> None:
    ((row, created),) = lifecycle.enqueue(queue, [NewTask(payload={"n": 1})])
    assert created and row["status"] == "pending"


def test_a_statement_is_prepared_once_and_then_only_run(queue: Queue) -> None:
    connection.ensure_connection()
    before = prepared_inserts()

    enqueue_one(queue)
    enqueue_one(queue)
    enqueue_one(queue)

    (insert,) = [row for row in prepared_inserts() if row not in before]
    # Parameters went to the server as parameters ($1...), not spliced into the text.
    assert "$1" in insert["statement"]
    assert insert["runs"] == 3


def test_nothing_is_prepared_behind_a_transaction_pooler(queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    connection.ensure_connection()
    monkeypatch.setattr(connection.connection, "prepare_threshold", None)  # what TASKFORGE_DB_PGBOUNCER sets

    before = prepared_inserts()

    enqueue_one(queue)

    assert prepared_inserts() == before  # nothing new prepared, nothing prepared run
    assert Queue.objects.get(pk=queue.pk).tasks.count() == 1


def test_recorded_queries_see_the_statement(queue: Queue) -> None:
    connection.ensure_connection()
    before = prepared_inserts()

    with CaptureQueriesContext(connection) as captured:
        enqueue_one(queue)

    assert any("INSERT INTO tf_task " in query["sql"] for query in captured.captured_queries)
    assert prepared_inserts() == before


def test_execute_wrappers_see_every_statement(queue: Queue) -> None:
    seen: list[str] = []

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        seen.append(sql)
        return execute(sql, params, many, context)

    connection.ensure_connection()
    runs_before = sum(row["runs"] for row in prepared_inserts())
    with connection.execute_wrapper(record):
        enqueue_one(queue)

    assert any("INSERT INTO tf_task " in sql for sql in seen)
    # ... and the statement still ran prepared.
    assert sum(row["runs"] for row in prepared_inserts()) == runs_before + 1
