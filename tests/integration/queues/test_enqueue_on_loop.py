"""Single enqueues on the event loop (queues.lifecycle.on_loop), with real tasks on real Postgres.

The same group commit as the thread path (``test_group_commit``), with
asyncio tasks for requests: the first enqueue's statement is held in flight
by a lock it needs (another session holds the queue row ``FOR UPDATE``,
which the insert's foreign-key check waits for); enqueues arriving meanwhile
go together as the next statement, one transaction, so one ``created_at``.
The loop's own pool (``taskforge.infra.postgres.aio``) is closed after each
test, as the API process closes it when it stops.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django import db

from queues import lifecycle
from queues.errors import QueueNotFound
from queues.lifecycle import on_loop
from queues.models import Queue, Task
from taskforge.http.errors import connection_lost
from taskforge.http.middleware import request_id_var
from taskforge.infra.postgres import aio
from tests import live
from tests.factories import QueueFactory
from tests.integration.queues.loop import run

pytestmark = pytest.mark.django_db(transaction=True)

FOLLOWERS = 4


@contextmanager
def queue_row_locked(queue: Queue) -> Iterator[psycopg.Connection[Any]]:
    """Another session holds the queue row for update: an insert into the queue waits at its FK check."""
    with psycopg.connect(live.test_database_url()) as other:
        other.execute("SELECT 1 FROM tf_queue WHERE id = %s FOR UPDATE", [queue.id])
        yield other


def _lock_waiters(watcher: psycopg.Connection[Any]) -> int:
    """Sessions of this test database waiting for a lock (the enqueues held at the queue row)."""
    row = watcher.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchone()
    assert row is not None
    return int(row[0])


def _waiting_behind_the_leader(queue: Queue) -> int:
    return sum(len(waiters) for key, waiters in on_loop._waiting.items() if key[0] == queue.id)


async def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def _enqueue_as(queue: Queue, name: str) -> lifecycle.Row:
    request_id_var.set(f"req-{name}")  # this request's own context (each asyncio task has one)
    return await lifecycle.enqueue_on_loop(queue, lifecycle.NewTask(payload={"from": name}))


def _leader_then_followers(queue: Queue, release: Callable[[psycopg.Connection[Any]], None]) -> dict[str, Any]:
    """One enqueue blocked in its statement, FOLLOWERS more behind it, then ``release``; each one's outcome."""
    names = ["leader", *(f"follower-{index}" for index in range(FOLLOWERS))]

    async def scenario() -> list[Any]:
        with queue_row_locked(queue) as other, psycopg.connect(live.test_database_url(), autocommit=True) as watcher:
            tasks = [asyncio.create_task(_enqueue_as(queue, names[0]))]
            await _until(lambda: _lock_waiters(watcher) == 1)
            tasks += [asyncio.create_task(_enqueue_as(queue, name)) for name in names[1:]]
            await _until(lambda: _waiting_behind_the_leader(queue) == FOLLOWERS)
            assert _lock_waiters(watcher) == 1  # they wait for the statement in flight, not at the lock
            release(other)
            return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)

    return dict(zip(names, run(scenario), strict=True))


def test_requests_arriving_while_a_statement_runs_share_the_next_one(stdout_log):
    queue = QueueFactory(name="loop-grouped")

    results = _leader_then_followers(queue, lambda other: other.rollback())

    for name, row in results.items():  # each request gets its own task, as alone
        assert row["payload"] == {"from": name}
        assert row["status"] == "pending"
    stored = {task.payload["from"]: task for task in Task.objects.filter(queue=queue)}
    assert set(stored) == set(results)
    assert {results[name]["id"] for name in stored} == {task.id for task in stored.values()}
    followers = {stored[name].created_at for name in stored if name != "leader"}
    assert len(followers) == 1  # one statement, one transaction for the four that waited
    assert stored["leader"].created_at not in followers
    # Each request logged its own transition under its own request id.
    logged = {line["task_id"]: line["request_id"] for line in stdout_log() if line.get("event") == "task.transition"}
    assert logged == {str(row["id"]): f"req-{name}" for name, row in results.items()}
    assert not on_loop._waiting


def test_a_failed_shared_statement_fails_every_request_it_carried_and_writes_nothing():
    queue = QueueFactory(name="loop-grouped-gone")

    def delete_the_queue(other: psycopg.Connection[Any]) -> None:
        other.execute("DELETE FROM tf_queue WHERE id = %s", [queue.id])
        other.commit()  # the queue is gone under the statement in flight and the one waiting

    results = _leader_then_followers(queue, delete_the_queue)

    assert all(isinstance(outcome, QueueNotFound) for outcome in results.values()), results
    assert not Task.objects.filter(queue_id=queue.id).exists()
    assert not on_loop._waiting  # the queue is free for the next enqueue


def test_the_task_is_announced_before_the_enqueue_returns():
    """A claim sent after the answer finds the task in its lane (Redis), as on the thread path."""
    from queues.dispatch import lanes
    from taskforge.infra.redis import redis_client

    queue = QueueFactory(name="loop-announced")
    row = run(lambda: lifecycle.enqueue_on_loop(queue, lifecycle.NewTask(payload={"n": 1})))
    laned = redis_client().zrange(lanes.ready_key(queue.name), 0, -1)
    assert laned == [str(row["id"]).encode()]


def test_both_paths_give_new_tasks_ids_of_version_7_in_the_order_they_were_made():
    queue = QueueFactory(name="loop-ids")
    on_the_loop = run(lambda: lifecycle.enqueue_on_loop(queue, lifecycle.NewTask(payload={"n": 1})))["id"]
    time.sleep(0.002)  # the next millisecond: the ids' time bits tell them apart
    on_the_threads = [row["id"] for row, _ in lifecycle.enqueue(queue, [lifecycle.NewTask(payload={})] * 3)]

    assert {task_id.version for task_id in [on_the_loop, *on_the_threads]} == {7}
    assert len(set(on_the_threads)) == 3
    assert all(on_the_loop < later for later in on_the_threads)
    stored = Task.objects.filter(queue_id=queue.id).order_by("id").values_list("id", flat=True)
    assert list(stored) == [on_the_loop, *sorted(on_the_threads)]  # Postgres orders them as Python does


def test_the_pool_replaces_connections_killed_while_idle():
    """``pg_terminate_backend`` of every connection the loop's pool holds: the next enqueue still succeeds."""
    queue = QueueFactory(name="loop-killed")

    async def scenario() -> list[lifecycle.Row]:
        first = await lifecycle.enqueue_on_loop(queue, lifecycle.NewTask(payload={"n": 1}))
        pool = await aio.pool()
        async with pool.connection() as conn:
            held = conn.info.backend_pid
        with psycopg.connect(live.test_database_url(), autocommit=True) as killer:
            killed = killer.execute("SELECT pg_terminate_backend(%s, 5000)", [held]).fetchone()
        assert killed == (True,)
        second = await lifecycle.enqueue_on_loop(queue, lifecycle.NewTask(payload={"n": 2}))
        return [first, second]

    rows = run(scenario)
    assert set(Task.objects.filter(queue=queue).values_list("id", flat=True)) == {row["id"] for row in rows}


def test_a_connection_out_of_step_with_its_server_is_closed_and_the_call_is_a_503():
    """As on the thread path (``test_db_unavailable``): no SQLSTATE, so no server said it; the pool drops it."""

    async def scenario() -> tuple[Exception, bool]:
        conn = await psycopg.AsyncConnection.connect(live.test_database_url())
        try:
            odd = db.InternalError("received 2 results from command 'BEGIN'")
            odd.__cause__ = psycopg.InternalError("received 2 results from command 'BEGIN'")
            return connection_lost(odd, conn), conn.closed
        finally:
            await conn.close()

    lost, closed = run(scenario)
    assert isinstance(lost, db.OperationalError)
    assert closed


def test_a_real_error_the_server_reported_stays_what_it_was():
    async def scenario() -> tuple[Exception, Exception, bool]:
        conn = await psycopg.AsyncConnection.connect(live.test_database_url())
        try:
            try:
                await conn.execute("SELECT 1/0")
            except psycopg.Error as exc:
                raised: Exception = exc
            wrapped = db.DataError(str(raised))  # as Django's wrap_database_errors hands it on
            wrapped.__cause__ = raised
            return wrapped, connection_lost(wrapped, conn), conn.closed
        finally:
            await conn.close()

    wrapped, lost, closed = run(scenario)
    assert lost is wrapped  # a bug or bad data, not an outage: a 500, the connection kept
    assert not closed


def test_with_redis_unreachable_the_enqueue_is_still_durable(settings, monkeypatch):
    """Redis holds nothing Postgres cannot rebuild: the lane write fails, the task is in, the outage noted."""
    from queues.dispatch import outage
    from tests.live import free_port

    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setattr(outage, "_redis_down_until", 0.0)
    queue = QueueFactory(name="loop-no-redis")

    row = run(lambda: lifecycle.enqueue_on_loop(queue, lifecycle.NewTask(payload={"n": 1})))

    assert Task.objects.get(id=row["id"]).status == "pending"
    assert not outage.redis_usable()  # the next calls go straight to Postgres for a while


def test_after_a_quiet_spell_the_counters_are_written_before_the_enqueue_returns():
    """As on the thread path: another process's /metrics, asked right after the answer, counts the task."""
    from queues.telemetry import counters
    from taskforge.infra.redis import redis_client

    queue = QueueFactory(name="loop-counted")
    counters.forget_pending()  # this process wrote nothing lately: the next move is written at once
    run(lambda: lifecycle.enqueue_on_loop(queue, lifecycle.NewTask(payload={"n": 1})))
    # Read straight from Redis, as another process would (snapshot() would flush this one's first).
    assert redis_client().hget(counters.ENQUEUED_KEY, queue.name) == b"1"


def test_a_cancelled_statement_writes_nothing_and_the_requests_behind_it_still_go():
    """The server stopping cancels a request mid-statement: psycopg cancels the query in Postgres, the
    request's task is not written, and the enqueues that queued behind it run their own statement."""
    queue = QueueFactory(name="loop-cancelled")
    names = [f"follower-{index}" for index in range(FOLLOWERS)]

    async def scenario() -> tuple[BaseException | lifecycle.Row, list[Any]]:
        with queue_row_locked(queue) as other, psycopg.connect(live.test_database_url(), autocommit=True) as watcher:
            leader = asyncio.create_task(_enqueue_as(queue, "leader"))
            await _until(lambda: _lock_waiters(watcher) == 1)
            followers = [asyncio.create_task(_enqueue_as(queue, name)) for name in names]
            await _until(lambda: _waiting_behind_the_leader(queue) == FOLLOWERS)
            leader.cancel()
            outcome = (await asyncio.gather(leader, return_exceptions=True))[0]
            await _until(lambda: _lock_waiters(watcher) == 1)  # the followers' statement, at the lock now
            other.rollback()
            return outcome, await asyncio.wait_for(asyncio.gather(*followers), 30)

    outcome, rows = run(scenario)
    assert isinstance(outcome, asyncio.CancelledError)
    assert sorted(row["payload"]["from"] for row in rows) == names
    assert sorted(task.payload["from"] for task in Task.objects.filter(queue=queue)) == names
    assert not on_loop._waiting
