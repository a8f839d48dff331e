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
from django.db import DataError, connection, transaction
from django.test.utils import CaptureQueriesContext

from queues import lifecycle
from queues.lifecycle.produce import NewTask
from queues.lifecycle.rows import Row, fetch_rows, fetch_rows_on
from queues.models import Queue
from taskforge.infra.postgres import aio
from tests.integration.queues.loop import run

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


def test_statements_one_after_another_on_a_connection_each_answer_with_their_own_rows() -> None:
    # Each connection keeps one cursor for the lifecycle's statements: a statement that failed
    # between two others leaves nothing behind for the next, on the threads or the event loop.
    listed = "SELECT unnest(%(ns)s::int[]) AS n"
    assert fetch_rows(listed, {"ns": [1, 2]}) == [{"n": 1}, {"n": 2}]
    with pytest.raises(DataError), transaction.atomic():  # a savepoint: the test runs in a transaction
        fetch_rows("SELECT 1 / %(zero)s AS n", {"zero": 0})
    assert fetch_rows("SELECT %(n)s::int AS n", {"n": 7}) == [{"n": 7}]
    assert fetch_rows(listed, {"ns": [3]}) == [{"n": 3}]

    async def on_one_connection() -> list[list[Row]]:
        pool = await aio.pool()
        async with pool.connection() as conn:
            answers = [await fetch_rows_on(conn, listed, {"ns": [1, 2]})]
            with pytest.raises(DataError):
                await fetch_rows_on(conn, "SELECT 1 / %(zero)s AS n", {"zero": 0})
            answers.append(await fetch_rows_on(conn, "SELECT %(n)s::int AS n", {"n": 7}))
            answers.append(await fetch_rows_on(conn, listed, {"ns": [3]}))
            return answers

    assert run(on_one_connection) == [[{"n": 1}, {"n": 2}], [{"n": 7}], [{"n": 3}]]
