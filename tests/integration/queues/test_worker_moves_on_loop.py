"""A worker's claim, heartbeat, ack and nack on the event loop (queues.lifecycle.lease_on_loop), on real services.

The same statements as the thread path, so the same guarantees: a task is
leased to one claimer at a time, whichever path each claimer takes (proven
here with claims racing on the loop's pool and on threads at once); a move
on a lease the worker does not hold changes nothing and is left to the
thread path, which says why. The loop's own pool is closed after each test.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import orjson
import pytest
from django import db
from django.utils import timezone

from queues import lifecycle
from queues.apikeys import create_key
from queues.dispatch import claiming, doorbell, lanes, outage
from queues.errors import LeaseLost
from queues.lifecycle import lease_on_loop, statements
from queues.models import Queue, Task
from queues.telemetry import counters, observe
from taskforge.http.lean import LeanCall
from taskforge.infra import change_watch
from taskforge.infra.postgres import aio
from taskforge.infra.redis import redis_client
from tests.factories import QueueFactory
from tests.integration.queues.loop import kept_plan, run
from workers import controls, hot, registry

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def redis_reachable(monkeypatch):
    monkeypatch.setattr(outage, "_redis_down_until", 0.0)  # no outage remembered from an earlier test


def _enqueue(queue: Queue, count: int, **fields: Any) -> list[lifecycle.Row]:
    return [
        row
        for row, _ in lifecycle.enqueue(queue, [lifecycle.NewTask(payload={"n": n}, **fields) for n in range(count)])
    ]


def _claim(queue: Queue, worker_id: str, max_tasks: int) -> list[lifecycle.Row]:
    return run(lambda: claiming.claim_one_queue_on_loop(worker_id, queue, max_tasks))


def test_a_claim_takes_the_lanes_best_ids_and_leases_them(stdout_log):
    queue = QueueFactory(name="loop-claim")
    low = _enqueue(queue, 2, priority=5)
    high = _enqueue(queue, 1, priority=1)

    claimed = _claim(queue, "w-loop", 2)

    assert claimed[0]["id"] == high[0]["id"]  # best first
    (left,) = [row for row in low if row["id"] != claimed[1]["id"]]  # the two low ones tie: either
    for row in claimed:
        stored = Task.objects.get(id=row["id"])
        assert (stored.status, stored.claimed_by, stored.attempts) == ("claimed", "w-loop", 1)
        assert stored.lease_token == row["lease_token"] and stored.lease_expires_at is not None
    # The lane still holds the one left; the moves were logged as the thread path logs them.
    assert redis_client().zrange(lanes.ready_key(queue.name), 0, -1) == [str(left["id"]).encode()]
    logged = {line["task_id"] for line in stdout_log() if line.get("to_status") == "claimed"}
    assert logged == {str(row["id"]) for row in claimed}


def test_a_lane_that_runs_dry_is_topped_up_by_a_postgres_scan():
    """Redis is only a buffer: tasks missing from the lane (lost with Redis, say) are still claimed."""
    queue = QueueFactory(name="loop-dry")
    rows = _enqueue(queue, 5)
    redis_client().zrem(lanes.ready_key(queue.name), *[str(row["id"]) for row in rows[:3]])

    claimed = _claim(queue, "w-loop", 10)

    assert {row["id"] for row in claimed} == {row["id"] for row in rows}
    assert _claim(queue, "w-loop", 10) == []


def test_a_larger_claim_takes_a_short_lane_on_the_loop_and_as_many_more_as_are_due():
    """Past ``most_on_loop`` a claim stays on the loop only for a short lane, and still gets every due task."""
    queue = QueueFactory(name="loop-short-lane")
    rows = _enqueue(queue, 9)
    redis_client().zrem(lanes.ready_key(queue.name), *[str(row["id"]) for row in rows[:4]])  # Postgres only

    claimed = run(lambda: claiming.claim_one_queue_on_loop("w-loop", queue, 20, most_on_loop=3))
    assert claimed is None  # the lane holds 5 ids, more than 3: the thread pool's claim, nothing taken
    assert redis_client().zcard(lanes.ready_key(queue.name)) == 5
    assert Task.objects.filter(queue=queue, status="pending").count() == 9

    claimed = run(lambda: claiming.claim_one_queue_on_loop("w-loop", queue, 20, most_on_loop=5))
    assert claimed is not None and {row["id"] for row in claimed} == {row["id"] for row in rows}
    assert [row["scheduled_at"] for row in claimed] == sorted(row["scheduled_at"] for row in claimed)
    assert Task.objects.filter(queue=queue, status="claimed", claimed_by="w-loop").count() == 9
    assert redis_client().zcard(lanes.ready_key(queue.name)) == 0


def test_a_larger_claim_leaves_an_empty_lane_or_an_unreachable_redis_to_the_thread_pool(settings, monkeypatch):
    """An empty lane says nothing about Postgres, which may hold a backlog: the scan of a batch is the threads'."""
    from tests.live import free_port

    queue = QueueFactory(name="loop-empty-lane")
    rows = _enqueue(queue, 12)
    redis_client().delete(lanes.ready_key(queue.name))

    assert run(lambda: claiming.claim_one_queue_on_loop("w-loop", queue, 20, most_on_loop=10)) is None
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    assert run(lambda: claiming.claim_one_queue_on_loop("w-loop", queue, 20, most_on_loop=10)) is None
    assert Task.objects.filter(queue=queue, status="pending").count() == len(rows)


def test_garbage_in_the_lane_is_dropped_and_the_claim_goes_on():
    queue = QueueFactory(name="loop-garbage")
    (row,) = _enqueue(queue, 1)
    redis_client().zadd(lanes.ready_key(queue.name), {"not-a-task": 0, str(uuid.uuid4()): 0})

    claimed = _claim(queue, "w-loop", 1)

    assert [task["id"] for task in claimed] == [row["id"]]


def test_a_paused_queue_gives_nothing():
    queue = QueueFactory(name="loop-paused")
    _enqueue(queue, 2)
    queue.paused = True

    assert _claim(queue, "w-loop", 2) == []
    assert Task.objects.filter(queue=queue, status="pending").count() == 2


def test_with_redis_unreachable_the_claim_comes_from_postgres(settings, monkeypatch):
    from tests.live import free_port

    queue = QueueFactory(name="loop-claim-no-redis")
    rows = _enqueue(queue, 3)
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")

    claimed = _claim(queue, "w-loop", 3)

    assert {row["id"] for row in claimed} == {row["id"] for row in rows}
    assert not outage.redis_usable()  # the next calls go straight to Postgres for a while


def test_claims_racing_on_the_loop_and_on_threads_never_share_a_task():
    """Four claimers on the loop's pool and two on threads (Django's connections) drain one queue at once."""
    queue = QueueFactory(name="loop-race")
    rows = _enqueue(queue, 300)
    got: list[tuple[str, uuid.UUID]] = []
    start = threading.Barrier(3)

    def thread_claimer(worker_id: str) -> None:
        try:
            start.wait()
            while claimed := claiming.claim(worker_id, queue, 3).rows:
                got.extend((worker_id, row["id"]) for row in claimed)
        finally:
            db.connection.close()

    async def loop_claimer(worker_id: str) -> None:
        while claimed := await claiming.claim_one_queue_on_loop(worker_id, queue, 3):
            got.extend((worker_id, row["id"]) for row in claimed)

    async def on_the_loop() -> None:
        await asyncio.to_thread(start.wait)
        await asyncio.gather(*(loop_claimer(f"loop-{n}") for n in range(4)))

    threads = [threading.Thread(target=thread_claimer, args=(f"thread-{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    run(on_the_loop)
    for thread in threads:
        thread.join(60)

    per_task = Counter(task_id for _, task_id in got)
    assert set(per_task) == {row["id"] for row in rows}
    assert max(per_task.values()) == 1  # no task leased twice
    holders = dict(Task.objects.filter(queue=queue).values_list("id", "claimed_by"))
    assert all(holders[task_id] == worker_id for worker_id, task_id in got)
    assert {worker_id.split("-")[0] for worker_id, _ in got} == {"loop", "thread"}  # both paths took tasks


def _claimed_one(name: str) -> tuple[Queue, lifecycle.Row]:
    queue = QueueFactory(name=name)
    _enqueue(queue, 1)
    (row,) = _claim(queue, "w-loop", 1)
    return queue, row


def test_a_heartbeat_starts_the_task_extends_its_lease_and_keeps_its_progress(stdout_log):
    _, claimed = _claimed_one("loop-beat")

    def beat(progress: dict[str, Any] | None) -> lifecycle.Row | None:
        return run(
            lambda: lifecycle.heartbeat_on_loop(
                claimed["id"], worker_id="w-loop", lease_token=claimed["lease_token"], progress=progress
            )
        )

    first = beat({"step": 1})
    second = beat(None)

    assert first is not None and second is not None
    assert (first["status"], second["status"]) == ("executing", "executing")
    assert second["lease_expires_at"] >= first["lease_expires_at"] >= claimed["lease_expires_at"]
    assert Task.objects.get(id=claimed["id"]).progress == {"step": 1}  # kept when a heartbeat has none
    started = [
        line for line in stdout_log() if line.get("event") == "task.transition" and line["to_status"] == "executing"
    ]
    assert [line["task_id"] for line in started] == [str(claimed["id"])]  # logged once, by the first


def test_an_ack_settles_the_task_rings_its_bell_and_counts_it(stdout_log, monkeypatch):
    queue, claimed = _claimed_one("loop-ack")
    monkeypatch.setattr(observe, "_queue_names", {})  # another process claimed it: the queue is not named here
    listener = _result_listener(claimed["id"])
    lifecycle.await_result(claimed["id"])  # as a request waiting for the result does
    counters.forget_pending()  # a quiet spell: the move is counted before the ack returns

    row = run(
        lambda: lifecycle.ack_on_loop(
            claimed["id"], worker_id="w-loop", lease_token=claimed["lease_token"], result={"ok": True}
        )
    )

    assert row is not None and row["status"] == "done"
    stored = Task.objects.get(id=claimed["id"])
    assert (stored.status, stored.result) == ("done", {"ok": True})
    bell = listener.get_message(timeout=5)
    listener.close()
    assert bell is not None and bell["type"] == "message"
    assert redis_client().hget(counters.COMPLETED_KEY, f"{queue.name}|done") == b"1"
    (line,) = [line for line in stdout_log() if line.get("to_status") == "done"]
    assert line["queue"] == queue.name  # read on the loop's pool


def _result_listener(task_id: uuid.UUID) -> Any:
    listener = redis_client().pubsub()
    listener.subscribe(doorbell.settled_channel(str(task_id)))
    listener.get_message(timeout=1)  # the subscription's confirmation
    return listener


def _first_bell_after(listener: Any, task_id: uuid.UUID) -> bytes:
    """The data of the first message on the task's channel, once the test rang it with b"sentinel" itself."""
    redis_client().publish(doorbell.settled_channel(str(task_id)), b"sentinel")
    message = listener.get_message(timeout=5)
    listener.close()
    assert message is not None and message["type"] == "message"
    return message["data"]


def test_an_ack_or_a_last_nack_of_a_task_nobody_awaits_rings_no_result_bell():
    """Only a task a request waited for rings (lifecycle.await_result): the others' moves publish nothing."""
    queue, acked = _claimed_one("loop-ack-unawaited")
    listener = _result_listener(acked["id"])
    row = run(
        lambda: lifecycle.ack_on_loop(acked["id"], worker_id="w-loop", lease_token=acked["lease_token"], result={})
    )
    assert row is not None and (row["status"], row["awaited"]) == ("done", False)
    # The move's after-answer work runs at once outside a request: a bell would have come first.
    assert _first_bell_after(listener, acked["id"]) == b"sentinel"

    queue.max_retries = 0
    queue.save()
    _enqueue(queue, 1)
    (nacked,) = _claim(queue, "w-loop", 1)
    listener = _result_listener(nacked["id"])
    item = lifecycle.NackItem(nacked["id"], "boom", lease_token=nacked["lease_token"])
    dead = run(lambda: lifecycle.nack_on_loop(item, worker_id="w-loop"))
    assert dead is not None and dead["status"] == "dead"
    assert _first_bell_after(listener, nacked["id"]) == b"sentinel"


def test_the_mark_of_an_awaited_task_is_written_once_and_never_on_a_settled_one():
    queue, claimed = _claimed_one("loop-await-mark")
    lifecycle.await_result(claimed["id"])
    version = _row_version(claimed["id"])
    lifecycle.await_result(claimed["id"])  # again: the row is not written again
    assert Task.objects.get(id=claimed["id"]).awaited is True and _row_version(claimed["id"]) == version
    _enqueue(queue, 2)
    (settled,) = _claim(queue, "w-loop", 1)
    (waiting,) = Task.objects.filter(queue=queue, status="pending")
    run(lambda: lifecycle.ack_on_loop(settled["id"], worker_id="w-loop", lease_token=settled["lease_token"], result={}))
    lifecycle.await_result(settled["id"])  # done already: its reader answers at once, no bell is owed
    lifecycle.await_result(uuid.uuid4())  # no such task: nothing to mark
    assert Task.objects.get(id=settled["id"]).awaited is False
    assert Task.objects.get(id=waiting.id).awaited is False


def _row_version(task_id: uuid.UUID) -> str:
    """The task row's xmin: it changes whenever the row is written."""
    with db.connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM tf_task WHERE id = %s", [task_id])
        return cursor.fetchone()[0]


def test_a_nack_retries_after_a_backoff_until_the_last_attempt_then_the_task_is_dead(stdout_log):
    """The thread path's decision (decide.failed_attempt_outcome) in the loop's transaction."""
    queue = QueueFactory(name="loop-nack", max_retries=1)
    _enqueue(queue, 1)
    (first,) = _claim(queue, "w-loop", 1)
    item = lifecycle.NackItem(first["id"], "boom", lease_token=first["lease_token"])
    before = timezone.now()

    retried = run(lambda: lifecycle.nack_on_loop(item, worker_id="w-loop"))

    assert retried is not None and retried["status"] == "retry"
    stored = Task.objects.get(id=first["id"])
    assert (stored.status, stored.last_error, stored.attempts) == ("retry", "boom", 1)
    assert stored.scheduled_at > before  # after a backoff
    Task.objects.filter(id=first["id"]).update(scheduled_at=stored.created_at)  # due now
    lifecycle.promote_due()
    (second,) = _claim(queue, "w-loop", 1)
    assert second["id"] == first["id"] and second["attempts"] == 2
    listener = _result_listener(first["id"])
    lifecycle.await_result(first["id"])

    dead = run(
        lambda: lifecycle.nack_on_loop(
            lifecycle.NackItem(first["id"], "boom again", lease_token=second["lease_token"]), worker_id="w-loop"
        )
    )

    assert dead is not None and dead["status"] == "dead"  # 1 + max_retries attempts failed
    assert Task.objects.get(id=first["id"]).status == "dead"
    bell = listener.get_message(timeout=5)  # a producer waiting on the result hears of it
    listener.close()
    assert bell is not None and bell["type"] == "message"
    moves = [line["to_status"] for line in stdout_log() if line.get("task_id") == str(first["id"])]
    assert moves[-1] == "dead" and "retry" in moves


def test_a_nack_without_retry_or_releasing_an_unstarted_task(stdout_log):
    queue, claimed = _claimed_one("loop-nack-kinds")
    _enqueue(queue, 1)
    (other,) = _claim(queue, "w-loop", 1)

    async def both() -> list[lifecycle.Row | None]:
        return [
            await lifecycle.nack_on_loop(
                lifecycle.NackItem(claimed["id"], "bad input", lease_token=claimed["lease_token"], retry=False),
                worker_id="w-loop",
            ),
            await lifecycle.nack_on_loop(
                lifecycle.NackItem(
                    other["id"], "shutting down", lease_token=other["lease_token"], retry_after_seconds=0, release=True
                ),
                worker_id="w-loop",
            ),
        ]

    gave_up, released = run(both)
    assert gave_up is not None and gave_up["status"] == "dead"
    assert released is not None and released["status"] == "retry"
    assert Task.objects.get(id=other["id"]).attempts == 0  # handed back unstarted: no attempt used up


def test_moves_on_a_lease_not_held_change_nothing_and_are_left_to_the_thread_path():
    """None from the loop; the thread path then answers as it always did (a 409, or a repeated ack's 200)."""
    _, claimed = _claimed_one("loop-not-held")
    lease = {"worker_id": "w-loop", "lease_token": "not-the-token"}

    async def wrong_token() -> list[lifecycle.Row | None]:
        return [
            await lifecycle.heartbeat_on_loop(claimed["id"], **lease, progress=None),
            await lifecycle.ack_on_loop(claimed["id"], **lease, result=None),
            await lifecycle.nack_on_loop(
                lifecycle.NackItem(claimed["id"], "x", lease_token=lease["lease_token"]), worker_id=lease["worker_id"]
            ),
        ]

    assert run(wrong_token) == [None, None, None]
    assert Task.objects.get(id=claimed["id"]).status == "claimed"
    with pytest.raises(LeaseLost):
        lifecycle.ack(claimed["id"], **lease)

    held = {"worker_id": "w-loop", "lease_token": claimed["lease_token"]}
    assert run(lambda: lifecycle.ack_on_loop(claimed["id"], **held, result=None)) is not None
    assert run(lambda: lifecycle.ack_on_loop(claimed["id"], **held, result=None)) is None  # a repeat moves nothing
    assert lifecycle.ack(claimed["id"], **held)["status"] == "done"  # which the thread path answers as before


# --- a nack decided from an unlocked read (lease_on_loop.nack_on_loop) ---------------------------


def _between_read_and_apply(monkeypatch, change: Callable[[], None]) -> None:
    """Make ``change`` (another connection's committed move) land after the nack's read, before its FAIL."""
    decide = lease_on_loop.nack_fail_one_params

    def decided_then_changed(*args: Any) -> dict[str, Any]:
        params = decide(*args)
        # On a thread of its own: its own connection, committed before the loop goes on.
        worker = threading.Thread(target=lambda: (change(), db.connection.close()))
        worker.start()
        worker.join()
        return params

    monkeypatch.setattr(lease_on_loop, "nack_fail_one_params", decided_then_changed)


def test_a_cancel_requested_after_the_nacks_read_is_not_overwritten_by_its_retry(monkeypatch):
    queue, claimed = _claimed_one("loop-nack-cancel")
    _between_read_and_apply(monkeypatch, lambda: lifecycle.cancel_or_request(queue, claimed["id"]))
    item = lifecycle.NackItem(claimed["id"], "boom", lease_token=claimed["lease_token"])

    assert run(lambda: lifecycle.nack_on_loop(item, worker_id="w-loop")) is None  # decided "retry": stale

    stored = Task.objects.get(id=claimed["id"])
    assert (stored.status, stored.cancel_requested, stored.attempts) == ("claimed", True, 1)
    # The thread path, which the edge runs next, decides again under its lock.
    assert lifecycle.nack_item(item, worker_id="w-loop")["status"] == "cancelled"


def test_a_lease_lost_after_the_nacks_read_is_left_to_the_thread_path(monkeypatch):
    _, claimed = _claimed_one("loop-nack-expired")

    def expire() -> None:
        Task.objects.filter(id=claimed["id"]).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
        assert lifecycle.expire_leases() == 1

    _between_read_and_apply(monkeypatch, expire)
    item = lifecycle.NackItem(claimed["id"], "boom", lease_token=claimed["lease_token"])

    assert run(lambda: lifecycle.nack_on_loop(item, worker_id="w-loop")) is None

    stored = Task.objects.get(id=claimed["id"])
    assert stored.status == "retry" and stored.last_error != "boom"  # the watchdog's failure, not the nack's
    with pytest.raises(LeaseLost):
        lifecycle.nack_item(item, worker_id="w-loop")


def test_nacks_on_the_loop_racing_cancel_requests_leave_every_task_cancelled():
    """Real concurrency: nacks on the loop's pool against cancel requests on threads, task by task.

    Whichever comes first, a task whose cancel was requested ends cancelled:
    a nack applied first leaves a retry, which the cancel then cancels at
    once; a cancel requested first turns the nack's decision into a cancel.
    No task may be left retrying (or dead) with its cancel requested.
    """
    queue = QueueFactory(name="loop-nack-race", max_retries=5)
    _enqueue(queue, 60)
    claimed = lifecycle.claim("w-loop", [queue.id], 60)
    assert len(claimed) == 60
    start = threading.Barrier(3)

    def cancel_all(rows: list[lifecycle.Row]) -> None:
        try:
            start.wait()
            for row in rows:
                lifecycle.cancel_or_request(queue, row["id"])
        finally:
            db.connection.close()

    async def nack_all() -> list[lifecycle.Row | None]:
        await asyncio.to_thread(start.wait)

        async def nack(row: lifecycle.Row) -> lifecycle.Row | None:
            item = lifecycle.NackItem(row["id"], "boom", lease_token=row["lease_token"])
            moved = await lifecycle.nack_on_loop(item, worker_id="w-loop")
            if moved is None:  # as the edge does: the thread path decides again, or says the lease is gone
                moved = await asyncio.to_thread(_nack_on_a_thread, item)
            return moved

        return list(await asyncio.gather(*(nack(row) for row in claimed)))

    cancellers = [threading.Thread(target=cancel_all, args=(claimed[part::2],)) for part in range(2)]
    for thread in cancellers:
        thread.start()
    nacked = run(nack_all)
    for thread in cancellers:
        thread.join()

    assert all(row is not None for row in nacked)
    final = Counter(Task.objects.filter(queue=queue).values_list("status", "cancel_requested"))
    assert set(final) <= {("cancelled", True), ("cancelled", False)}, final
    assert sum(final.values()) == 60


def _nack_on_a_thread(item: lifecycle.NackItem) -> lifecycle.Row | None:
    try:
        return lifecycle.nack_item(item, worker_id="w-loop")
    except LeaseLost:
        return None
    finally:
        db.connection.close()


async def _held_by_other_workers(queue: Queue, count: int) -> None:
    """``count`` tasks of ``queue`` claimed by fifty other workers, written in one statement on the loop's pool."""
    pool = await aio.pool()
    async with pool.connection() as conn:
        await conn.execute(
            """
            INSERT INTO tf_task (id, queue_id, payload, status, priority, scheduled_at, created_at, updated_at,
                                 status_changed_at, attempts, max_retries, claimed_by, claimed_at, lease_token,
                                 lease_expires_at)
            SELECT gen_random_uuid(), %s, '{}'::jsonb, 'claimed', 5, now(), now(), now(), now(), 1, 3,
                   'w-other-' || (g %% 50), now(), 't', now() + interval '1 hour'
            FROM generate_series(1, %s) g
            """,
            [queue.id, count],
        )


def test_a_nacks_two_statements_keep_their_plans_and_never_read_the_whole_table(settings):
    # As the ack's: made while tf_task is nearly empty, used once thousands of held tasks arrived.
    settings.DB_LOOP_POOL_SIZE = 1
    queue = QueueFactory(name="kept-nack", max_retries=5)
    with db.connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE tf_task")
    _enqueue(queue, 9)
    held = lifecycle.claim("w-kept", [queue.id], 9)

    async def scenario() -> list[tuple[int, str]]:
        for row in held[:8]:
            item = lifecycle.NackItem(row["id"], "boom", lease_token=row["lease_token"])
            nacked = await lifecycle.nack_on_loop(item, worker_id="w-kept")
            assert nacked is not None and nacked["status"] == "retry"
        await _held_by_other_workers(queue, 5000)
        last = held[8]
        item = lifecycle.NackItem(last["id"], "boom", lease_token=last["lease_token"])
        read_params = lifecycle.lease.nack_read_one_params("w-kept", item)
        plans = [await kept_plan(statements.READ_HELD_FOR_NACK_ONE, read_params)]
        read = {"attempts": 1, "max_retries": 5, "cancel_requested": False, "retry_base_ms": 1000}
        fail_params = lifecycle.lease.nack_fail_one_params(
            "w-kept", item, {"id": last["id"], **read, "retry_max_delay_ms": 60_000}
        )
        plans.append(await kept_plan(statements.FAIL_ONE_IF_UNCHANGED, fail_params))
        assert await lifecycle.nack_on_loop(item, worker_id="w-kept")
        return plans

    for generic, plan in run(scenario):
        assert generic >= 1  # the plan was kept, not made again on each run
        found = plan.split("CTE moved")[0]
        assert "Seq Scan on tf_task" not in plan and "tf_task_pkey" in found, plan


# --- the lean edge's routing (workers.hot) ----------------------------------------------------


class Routed:
    """The lean edge's worker handlers called as the edge calls them, noting which calls went to the thread pool."""

    def __init__(self, raw_key: str) -> None:
        self.authorization = f"Bearer {raw_key}"
        self.in_threads: list[str] = []
        self.handlers = {route.view_name: route for route in hot.routes()}

    def call(self, view_name: str, body: dict[str, Any]) -> Any:
        route = self.handlers[view_name]

        async def left() -> Any:
            await asyncio.Event().wait()  # the client never leaves

        async def in_thread(work: Callable[[], Any]) -> Any:
            self.in_threads.append(view_name)

            def on_a_thread() -> Any:
                try:
                    return work()
                finally:
                    db.connection.close()

            return await asyncio.to_thread(on_a_thread)

        call = LeanCall(
            method="POST",
            path="/workers/" + view_name.removeprefix("worker-"),
            view_class=route.view_class,
            params={},
            query_string="",
            authorization=self.authorization,
            content_type="application/json",
            body=orjson.dumps(body),
            receive=left,
        )
        return run(lambda: route.handler(call, in_thread))


def _until_on_the_loop(edge: Routed, view_name: str, body: Callable[[], dict[str, Any]], tries: int = 20) -> Any:
    """Send the call until one is served on the loop; its answer.

    A change to any key or queue, by any process on this Redis (other test
    processes too), makes this process's copies stale until a call on the
    thread pool reads them again: such a call is the thread pool's.
    """
    for _ in range(tries):
        before = len(edge.in_threads)
        answer = edge.call(view_name, body())
        if len(edge.in_threads) == before:
            return answer
    raise AssertionError(f"no {view_name} of {tries} ran on the event loop")


def test_warm_calls_run_on_the_loop_and_cold_or_refused_ones_on_the_thread_pool(monkeypatch):
    """A worker's first claim, heartbeat and ack of a second write its "last seen" row: the thread pool's.
    Warm ones, with the key, queue and controls in the process's copies, run on the loop; a batch claim
    never does, and an ack on a lease not held leaves it after its statement moved nothing."""
    watch = change_watch.current()  # copies are trusted only while the watch listens (it starts at first use)
    assert watch is not None and watch.wait_listening(10)
    monkeypatch.setattr(registry, "SEEN_RESOLUTION_SECONDS", 600.0)  # "last seen" not due again mid-test
    queue = QueueFactory(name="loop-routed")
    _enqueue(queue, 30)
    _, raw = create_key("loop-routed", "worker")
    edge = Routed(raw)
    claim = {"worker_id": "w-routed", "queue": queue.name, "max_tasks": 1}

    status, first = edge.call("worker-claim", claim)
    assert status == 200 and edge.in_threads == ["worker-claim"]  # cold: key, queue, registry
    status, second = _until_on_the_loop(edge, "worker-claim", lambda: claim)
    assert status == 200
    (one,), (two,) = first["tasks"], second["tasks"]
    assert one["id"] != two["id"] and two["lease_token"]

    leases = [
        {"worker_id": "w-routed", "task_id": task["id"], "lease_token": task["lease_token"]} for task in (one, two)
    ]
    assert edge.call("worker-heartbeat", leases[0])[1]["status"] == "executing"
    assert _until_on_the_loop(edge, "worker-heartbeat", lambda: leases[1])[1]["status"] == "executing"
    assert edge.call("worker-ack", {**leases[0], "result": {"n": 1}})[1]["status"] == "done"
    assert _until_on_the_loop(edge, "worker-ack", lambda: {**leases[1], "result": {"n": 2}})[1]["status"] == "done"

    status, batch = edge.call("worker-claim", {**claim, "max_tasks": hot.LOOP_CLAIM_MAX_TASKS + 1})
    assert status == 200 and len(batch["tasks"]) == 11 and edge.in_threads[-1] == "worker-claim"  # threads'
    (three,) = edge.call("worker-claim", claim)[1]["tasks"]
    with pytest.raises(LeaseLost):  # the edge answers it as the contract's 409
        edge.call("worker-ack", {"worker_id": "w-routed", "task_id": three["id"], "lease_token": "nope"})
    assert edge.in_threads[-1] == "worker-ack"  # the loop's statement moved nothing: the thread pool said why
    assert Task.objects.get(id=three["id"]).status == "claimed"


def test_a_larger_claim_woken_in_its_long_poll_takes_a_short_lane_on_the_loop(monkeypatch):
    """Past LOOP_CLAIM_MAX_TASKS a claim's first attempt is the thread pool's; once its poll waited, a short
    lane is the loop's (a trickle: each task's start saves the thread hand-off)."""
    watch = change_watch.current()
    assert watch is not None and watch.wait_listening(10)
    monkeypatch.setattr(registry, "SEEN_RESOLUTION_SECONDS", 600.0)
    queue = QueueFactory(name="loop-woken")
    _, raw = create_key("loop-woken", "worker")
    edge = Routed(raw)
    claim = {"worker_id": "w-woken", "queue": queue.name, "max_tasks": 50, "wait_seconds": 5}

    def woken_on_the_loop() -> bool:
        """One poll on an empty queue, a task enqueued while it waits: whether the attempt that took it ran here."""
        in_threads_then: list[int] = []

        def enqueue_later() -> None:
            time.sleep(0.5)  # the poll waits by now
            in_threads_then.append(len(edge.in_threads))
            _enqueue(queue, 1)
            db.connection.close()

        later = threading.Thread(target=enqueue_later)
        later.start()
        status, answer = edge.call("worker-claim", claim)
        later.join()
        assert status == 200 and len(answer["tasks"]) == 1
        assert edge.in_threads[0] == "worker-claim"  # the first attempt: a batch's, whatever the lane
        # A change to any key or queue by any process makes this process's copies stale until the
        # thread pool reads them again: such an attempt is the thread pool's.
        return len(edge.in_threads) == in_threads_then[0]

    assert any(woken_on_the_loop() for _ in range(5))
    assert Task.objects.filter(queue=queue, status="claimed", claimed_by="w-woken").count() >= 1


def _leases_held(name: str, worker_id: str, monkeypatch: Any) -> tuple[Queue, Routed, Iterator[dict[str, Any]]]:
    """A queue ``name`` and its key, the edge, and the leases of 25 tasks ``worker_id`` claimed through it, one each.

    The copies are trusted only while the change watch listens, and the worker's "last seen" is
    not due again during the test once written.
    """
    watch = change_watch.current()
    assert watch is not None and watch.wait_listening(10)
    monkeypatch.setattr(registry, "SEEN_RESOLUTION_SECONDS", 600.0)
    queue = QueueFactory(name=name)
    _enqueue(queue, 25)
    _, raw = create_key(name, "worker")
    edge = Routed(raw)
    claim = {"worker_id": worker_id, "queue": queue.name, "max_tasks": 1}
    claimed = [edge.call("worker-claim", claim)[1]["tasks"][0] for _ in range(25)]
    leases = [{"worker_id": worker_id, "task_id": task["id"], "lease_token": task["lease_token"]} for task in claimed]
    return queue, edge, iter(leases)


def test_a_warm_ack_runs_on_the_loop_without_the_workers_controls_read(monkeypatch):
    """An ack's answer carries no control: with the controls' copy dropped it stays on the loop, a heartbeat not."""
    _, edge, leases = _leases_held("loop-uncontrolled", "w-free", monkeypatch)
    edge.call("worker-heartbeat", next(leases))  # "last seen" of each kind written: warm from here on
    edge.call("worker-ack", next(leases))

    def without_controls() -> dict[str, Any]:
        controls._controlled.clear()  # as after a change to any control, until the thread pool reads them again
        return next(leases)

    before = len(edge.in_threads)
    assert edge.call("worker-heartbeat", without_controls())[1]["status"] == "executing"
    assert edge.in_threads[before:] == ["worker-heartbeat"]  # its answer carries the control: the thread pool's
    assert _until_on_the_loop(edge, "worker-ack", without_controls)[1]["status"] == "done"


def test_a_warm_nack_runs_on_the_loop_and_one_on_a_lease_not_held_is_the_thread_pools_409(monkeypatch):
    queue, edge, held = _leases_held("loop-nack-routed", "w-failing", monkeypatch)
    leases = ({**lease, "error": "boom"} for lease in held)
    status, first = edge.call("worker-nack", next(leases))  # "last seen" written: warm from here on
    assert status == 200 and first["status"] == "retry"

    status, answer = _until_on_the_loop(edge, "worker-nack", lambda: next(leases))
    assert status == 200 and answer["status"] == "retry" and answer["last_error"] == "boom"
    assert answer["queue"] == queue.name  # the same answer as the thread pool's: the task
    assert Task.objects.get(id=answer["id"]).status == "retry"

    lost = {**next(leases), "lease_token": "nope"}
    before = len(edge.in_threads)
    with pytest.raises(LeaseLost):  # the edge answers it as the contract's 409
        edge.call("worker-nack", lost)
    assert edge.in_threads[before:] == ["worker-nack"]  # the loop's lock found nothing: the thread pool said why
    assert Task.objects.get(id=lost["task_id"]).status == "claimed"


def test_batch_acks_and_nacks_are_served_by_the_edge_on_the_thread_pool(monkeypatch):
    """The reference worker's batch forms: each one call on the thread pool, each item's outcome in order."""
    _, edge, held = _leases_held("edge-batches", "w-batches", monkeypatch)
    leases = [{k: v for k, v in next(held).items() if k != "worker_id"} for _ in range(4)]

    before = len(edge.in_threads)
    status, acked = edge.call(
        "worker-ack-batch", {"worker_id": "w-batches", "items": [leases[0], {**leases[1], "lease_token": "nope"}]}
    )
    assert status == 200
    assert [r.get("status") or r["error"]["code"] for r in acked["results"]] == ["done", "lease_lost"]
    status, nacked = edge.call(
        "worker-nack-batch",
        {"worker_id": "w-batches", "items": [{**lease, "error": "boom"} for lease in leases[1:]]},
    )
    assert status == 200 and [r["status"] for r in nacked["results"]] == ["retry", "retry", "retry"]
    assert edge.in_threads[before:] == ["worker-ack-batch", "worker-nack-batch"]
    assert Task.objects.get(id=leases[0]["task_id"]).status == "done"
    assert {Task.objects.get(id=lease["task_id"]).status for lease in leases[1:]} == {"retry"}


def test_an_ack_keeps_its_plan_and_the_plan_never_reads_the_whole_table(settings):
    # As a claim of one id (test_claim_plans.py): the ack of one task is a statement whose plan
    # Postgres keeps, made here while tf_task is nearly empty, then used once thousands of tasks
    # held by other workers have arrived. It still finds its row by the primary key.
    settings.DB_LOOP_POOL_SIZE = 1  # one connection: every ack below runs on it
    queue = QueueFactory(name="kept-ack")
    with db.connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE tf_task")
    _enqueue(queue, 9)
    held = lifecycle.claim("w-kept", [queue.id], 9)

    async def scenario() -> tuple[int, str]:
        for row in held[:8]:  # prepared on its first run; from the sixth on, Postgres keeps one plan
            acked = await lifecycle.ack_on_loop(
                row["id"], worker_id="w-kept", lease_token=row["lease_token"], result={"n": 1}
            )
            assert acked is not None and acked["status"] == "done"
        await _held_by_other_workers(queue, 5000)
        last = held[8]
        item = lifecycle.lease.AckItem(last["id"], last["lease_token"], None)
        kept = await kept_plan(statements.ACK_ONE, lifecycle.lease.ack_one_params("w-kept", item))
        assert await lifecycle.ack_on_loop(last["id"], worker_id="w-kept", lease_token=last["lease_token"], result=None)
        return kept

    generic, plan = run(scenario)
    assert generic >= 1  # the plan was kept, not made again on each run
    held_part = plan.split("CTE moved")[0]
    assert "Seq Scan on tf_task" not in plan and "tf_task_pkey" in held_part, plan
