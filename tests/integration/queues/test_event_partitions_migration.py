"""Migration 0010 converts a busy, plain tf_task_event in place: no row copied, writers held up only by the swap.

The suite converts 20,000 events; ``python -m bench.partitions`` measures the
same conversion on 1,000,000 (docs/operations.md#history-partitions).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from queues.models import TaskEvent
from queues.partitions import catalog
from tests import live
from tests.factories import QueueFactory

BEFORE = ("queues", "0009_queue_push")
AFTER = ("queues", "0010_partition_task_events")
ROWS = 20_000


def _task(queue: object) -> tuple[object, object]:
    """A pending task of ``queue`` written with the columns tf_task had at 0009 (the model's later ones absent then)."""
    return _one(
        "INSERT INTO tf_task (id, queue_id, payload, status, priority, scheduled_at, created_at, updated_at,"
        " status_changed_at, attempts, max_retries)"
        " VALUES (gen_random_uuid(), %s, '{}', 'pending', 5, now(), now(), now(), now(), 0, 3)"
        " RETURNING id, created_at",
        [queue.id],  # type: ignore[attr-defined]
    )


def _one(statement: str, params: list[object] | None = None) -> tuple[object, ...]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchone()  # type: ignore[no-any-return]


@pytest.fixture
def unpartitioned() -> Iterator[MigrationExecutor]:
    """tf_task_event as it was before 0010; migrated forward again afterwards, whatever the test did."""
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    yield executor
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


class Writer(threading.Thread):
    """Inserts events one by one on its own connection (statements prepared, as a pooled client's are)."""

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self.dsn = dsn
        self.stop = threading.Event()
        self.written = 0
        self.slowest = 0.0
        self.failures: list[BaseException] = []

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True, prepare_threshold=0) as conn:
            while not self.stop.is_set():
                started = time.perf_counter()
                try:
                    conn.execute(
                        "INSERT INTO tf_task_event (task_id, queue_id, kind, at, to_status)"
                        " VALUES (gen_random_uuid(), gen_random_uuid(), 'transition', now(), 'pending')"
                    )
                    self.written += 1
                except psycopg.Error as exc:
                    self.failures.append(exc)
                self.slowest = max(self.slowest, time.perf_counter() - started)


@pytest.mark.django_db(transaction=True)
def test_the_conversion_keeps_every_row_while_writers_go_on(unpartitioned):
    assert _one("SELECT relkind FROM pg_class WHERE relname = 'tf_task_event'") == ("r",)
    queue = QueueFactory(name="converted")
    task_id, _ = _task(queue)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tf_task_event (task_id, queue_id, kind, at, to_status)"
            " SELECT %s, %s, 'transition', now() - g * interval '10 seconds', 'pending'"
            " FROM generate_series(1, %s) AS g",
            [task_id, queue.id, ROWS],
        )
    (old_max,) = _one("SELECT max(id) FROM tf_task_event")
    writer = Writer(live.test_database_url())
    writer.start()
    try:
        time.sleep(0.2)
        unpartitioned.loader.build_graph()
        unpartitioned.migrate([AFTER])
        time.sleep(0.2)
    finally:
        writer.stop.set()
        writer.join()

    assert writer.failures == []
    assert writer.written > 0
    assert writer.slowest < 1.0, f"a write waited {writer.slowest:.3f} s"
    assert _one("SELECT relkind FROM pg_class WHERE relname = 'tf_task_event'") == ("p",)
    assert _one("SELECT count(*), count(DISTINCT id) FROM tf_task_event") == (ROWS + writer.written,) * 2
    # The old table is the first partition, whole: no row was copied out of it.
    partitions = catalog.read().partitions
    first = partitions[0]
    assert first.name.startswith("tf_task_event_before_") and first.lower is None
    assert _one(f'SELECT count(*) FROM "{first.name}"') == (ROWS + writer.written,)
    assert partitions[-1].upper is None
    assert _one(
        "SELECT array_agg(a.attname ORDER BY k.ord) FROM pg_constraint c"
        " CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(num, ord)"
        " JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.num"
        " WHERE c.conrelid = 'tf_task_event'::regclass AND c.contype = 'p'"
    ) == (["id", "at"],)
    # Ids carry on from the old sequence, and the ORM reads and writes as before.
    event = TaskEvent.objects.create(task_id=task_id, queue=queue, at=first.upper, to_status="claimed")
    assert event.id > old_max + writer.written  # type: ignore[operator]
    assert TaskEvent.objects.filter(task_id=task_id).count() == ROWS + 1
    assert TaskEvent.objects.filter(task_id=task_id).latest("id").to_status == "claimed"


@pytest.mark.django_db(transaction=True)
def test_reversing_the_conversion_gives_back_a_plain_table_with_every_row(unpartitioned):
    unpartitioned.loader.build_graph()
    unpartitioned.migrate([AFTER])
    queue = QueueFactory(name="reversed")
    task_id, created_at = _task(queue)
    TaskEvent.objects.create(task_id=task_id, queue=queue, at=created_at, to_status="pending")
    unpartitioned.loader.build_graph()
    unpartitioned.migrate([BEFORE])
    assert _one("SELECT relkind FROM pg_class WHERE relname = 'tf_task_event'") == ("r",)
    assert TaskEvent.objects.get(task_id=task_id).to_status == "pending"
    assert TaskEvent.objects.create(task_id=task_id, queue=queue, at=created_at, to_status="claimed").id
