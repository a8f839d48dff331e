"""The state machine: every allowed edge happens through queues.lifecycle, no other edge ever does.

Tasks are built directly in a state by the factories (set-up, not a move); every
move under test is a lifecycle call.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from queues import lifecycle
from queues.errors import InvalidTransition, LeaseLost, TaskNotFound
from queues.models import ALLOWED_TRANSITIONS, DeadLetterTask, Queue, Status, Task, TaskEvent
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db

STATES = list(Status.values)


def make_task(status: str, queue: Queue) -> Task:
    """A task sitting in ``status``, ready for whatever move that status allows."""
    past = timezone.now() - timedelta(minutes=5)
    if status == Status.PENDING:
        return TaskFactory(queue=queue, scheduled_at=past)
    if status == Status.CLAIMED:
        return TaskFactory(queue=queue, claimed=True)
    if status == Status.EXECUTING:
        return TaskFactory(queue=queue, claimed=True, status=Status.EXECUTING, heartbeat_at=timezone.now())
    if status == Status.RETRY:
        return TaskFactory(queue=queue, retry_due=True)
    if status == Status.DEAD:
        return TaskFactory(queue=queue, dead=True)
    if status == Status.DONE:
        return TaskFactory(queue=queue, done=True, claimed_by="worker-1", lease_token="t" * 32)
    return TaskFactory(queue=queue, status=status)


def _expire(task: Task) -> None:
    Task.objects.filter(pk=task.pk).update(lease_expires_at=timezone.now() - timedelta(minutes=5))
    lifecycle.expire_leases()


def _promote(task: Task) -> None:
    Task.objects.filter(pk=task.pk).update(scheduled_at=timezone.now() - timedelta(minutes=5))
    lifecycle.promote_due()


def _holder(task: Task) -> dict:
    return {"worker_id": task.claimed_by or "worker-1", "lease_token": task.lease_token}


# Every public move of the lifecycle, each given its best chance to act on the task.
OPERATIONS: dict[str, Callable[[Task], object]] = {
    "claim": lambda t: lifecycle.claim("worker-x", [t.queue_id], 10),
    "heartbeat": lambda t: lifecycle.heartbeat(t.id, **_holder(t)),
    "ack": lambda t: lifecycle.ack(t.id, **_holder(t), result={"ok": 1}),
    "nack": lambda t: lifecycle.nack(t.id, **_holder(t), error="boom"),
    "nack_no_retry": lambda t: lifecycle.nack(t.id, **_holder(t), error="boom", retry=False),
    "expire": _expire,
    "promote": _promote,
    "retry_now": lambda t: lifecycle.retry_now([t.id]),
    "cancel": lambda t: lifecycle.cancel(t.queue, t.id),
    "cancel_running": lambda t: (
        lifecycle.request_cancel(t.queue, t.id),
        lifecycle.nack(t.id, **_holder(t), error="x"),
    ),
    "purge": lambda t: lifecycle.purge(t.queue),
    "replay": lambda t: lifecycle.replay(t.queue, t.id),
    "replay_many": lambda t: lifecycle.replay_many(t.queue, [t.id]),
}

# The move that takes each allowed edge.
EDGE_OPERATION = {
    (Status.PENDING, Status.CLAIMED): "claim",
    (Status.PENDING, Status.CANCELLED): "cancel",
    (Status.CLAIMED, Status.EXECUTING): "heartbeat",
    (Status.CLAIMED, Status.DONE): "ack",
    (Status.CLAIMED, Status.RETRY): "nack",
    (Status.CLAIMED, Status.DEAD): "nack_no_retry",
    (Status.CLAIMED, Status.CANCELLED): "cancel_running",
    (Status.EXECUTING, Status.DONE): "ack",
    (Status.EXECUTING, Status.RETRY): "nack",
    (Status.EXECUTING, Status.DEAD): "nack_no_retry",
    (Status.EXECUTING, Status.CANCELLED): "cancel_running",
    (Status.RETRY, Status.PENDING): "promote",
    (Status.RETRY, Status.CANCELLED): "cancel",
    (Status.DEAD, Status.PENDING): "replay",
}


def test_every_allowed_edge_has_a_move():
    allowed = {(a, b) for a, targets in ALLOWED_TRANSITIONS.items() for b in targets}
    assert allowed == set(EDGE_OPERATION)
    assert set(ALLOWED_TRANSITIONS) == set(STATES)


def run(operation: str, task: Task) -> None:
    try:
        OPERATIONS[operation](task)
    except (InvalidTransition, LeaseLost, TaskNotFound):
        pass


def transitions_of(task: Task) -> list[tuple[str | None, str]]:
    events = TaskEvent.objects.filter(task_id=task.id, kind=TaskEvent.Kind.TRANSITION).order_by("id")
    return list(events.values_list("from_status", "to_status"))


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(STATES, STATES)))
def test_status_pair(src, dst):
    allowed = dst in ALLOWED_TRANSITIONS[src]
    if allowed:
        task = make_task(src, QueueFactory())
        run(EDGE_OPERATION[(src, dst)], task)
        task.refresh_from_db()
        assert task.status == dst
        assert transitions_of(task) == [(src, dst)]
        return
    # Not an edge: no move of the lifecycle takes a task from src to dst.
    for operation in OPERATIONS:
        task = make_task(src, QueueFactory())
        run(operation, task)
        reached = Task.objects.filter(pk=task.pk).values_list("status", flat=True).first()
        history = transitions_of(task)
        assert (src, dst) not in history, (operation, history)
        if src != dst:
            assert reached != dst, operation
        # Whatever did happen was an allowed edge, recorded once.
        for from_status, to_status in history:
            assert to_status in ALLOWED_TRANSITIONS[from_status], (operation, history)
        if reached is not None and reached != src:
            assert history == [(src, reached)], (operation, history)


# --- the moves' details ----------------------------------------------------------------------


def test_claim_leases_and_counts_the_attempt(queue):
    task = TaskFactory(queue=queue)
    (row,) = lifecycle.claim("w-1", [queue.id], 5)
    assert (row["id"], row["status"], row["attempts"], row["claimed_by"]) == (task.id, "claimed", 1, "w-1")
    assert row["lease_token"] and row["lease_expires_at"] > row["claimed_at"]
    assert lifecycle.claim("w-2", [queue.id], 5) == []


def test_claim_skips_future_and_other_queues(queue):
    TaskFactory(queue=queue, scheduled_at=timezone.now() + timedelta(minutes=1))
    TaskFactory(queue=QueueFactory(name="other"))
    assert lifecycle.claim("w-1", [queue.id], 5) == []


def test_a_task_runs_at_most_one_plus_max_retries_times(queue):
    queue.retry_base_ms = 1
    queue.retry_max_delay_ms = 1
    queue.save()
    task = lifecycle.enqueue(queue, [lifecycle.NewTask(payload={}, max_retries=2)])[0][0]
    runs = 0
    while True:
        Task.objects.filter(pk=task["id"]).update(scheduled_at=timezone.now() - timedelta(minutes=5))
        lifecycle.promote_due()
        claimed = lifecycle.claim("w-1", [queue.id], 1)
        if not claimed:
            break
        runs += 1
        assert claimed[0]["attempts"] == runs
        outcome = lifecycle.nack(task["id"], worker_id="w-1", error=f"fail {runs}")
        assert outcome["status"] == (Status.DEAD if runs == 3 else Status.RETRY)
    assert runs == 3
    entry = DeadLetterTask.objects.get(pk=task["id"])
    assert (entry.attempts, entry.last_error, entry.replay_count) == (3, "fail 3", 0)


def test_lease_expiry_is_a_failed_attempt(queue, settings):
    task = TaskFactory(queue=queue, expired_lease=True, attempts=1, max_retries=1)
    assert lifecycle.expire_leases() == 1
    task.refresh_from_db()
    assert task.status == Status.RETRY
    assert "lease expired" in task.last_error and "worker-1" in task.last_error
    assert task.lease_expires_at is None
    # The last attempt's expiry kills it.
    Task.objects.filter(pk=task.pk).update(scheduled_at=timezone.now() - timedelta(minutes=5))
    lifecycle.promote_due()
    lifecycle.claim("w-2", [queue.id], 1)
    Task.objects.filter(pk=task.pk).update(lease_expires_at=timezone.now() - timedelta(minutes=5))
    assert lifecycle.expire_leases() == 1
    task.refresh_from_db()
    assert (task.status, task.attempts) == (Status.DEAD, 2)
    assert DeadLetterTask.objects.get(pk=task.pk).last_error.startswith("lease expired")


def test_expire_leaves_live_leases_alone(queue):
    live = TaskFactory(queue=queue, claimed=True)
    assert lifecycle.expire_leases() == 0
    live.refresh_from_db()
    assert live.status == Status.CLAIMED


def test_promote_keeps_the_backoff_time(queue):
    due_at = timezone.now() + timedelta(seconds=2)
    task = TaskFactory(queue=queue, retry_due=True, scheduled_at=due_at)
    assert lifecycle.promote_due() == []
    (row,) = lifecycle.promote_due(horizon_seconds=60)
    assert (row["id"], row["status"], row["scheduled_at"]) == (task.id, Status.PENDING, due_at)
    # Promoted early, it is still not claimable before its time.
    assert lifecycle.claim("w-1", [queue.id], 1) == []


def test_replay_resets_the_attempt_budget(queue):
    task = TaskFactory(queue=queue, dead=True, attempts=4, claimed_by="w-1", lease_token="x" * 32)
    row = lifecycle.replay(queue, task.id, actor="ops")
    assert (row["status"], row["attempts"], row["claimed_by"], row["lease_token"]) == ("pending", 0, None, None)
    entry = DeadLetterTask.objects.get(pk=task.id)
    assert entry.replay_count == 1 and entry.replayed_at is not None
    assert TaskEvent.objects.filter(task_id=task.id).get().detail == "replayed by ops"


def test_enqueue_records_history_and_returns_created_flags(queue):
    results = lifecycle.enqueue(
        queue,
        [
            lifecycle.NewTask(payload={"n": 1}),
            lifecycle.NewTask(payload={"n": 2}, idempotency_key="k", fingerprint="f"),
        ],
    )
    assert [created for _, created in results] == [True, True]
    again = lifecycle.enqueue(queue, [lifecycle.NewTask(payload={"n": 2}, idempotency_key="k", fingerprint="f")])
    assert again[0][1] is False and again[0][0]["id"] == results[1][0]["id"]
    assert TaskEvent.objects.filter(from_status__isnull=True, to_status="pending").count() == 2


LIFECYCLE_STATEMENTS = {
    "queues/lifecycle/statements.py",
    "queues/lifecycle/claim_statements.py",
    "queues/lifecycle/bulk_statements.py",
}


def test_nothing_outside_the_lifecycle_writes_status():
    """``git grep`` for status writes: only the lifecycle's statements (and migrations/tests) may set it."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[3]
    pattern = re.compile(
        r"(SET\s+(\w+\.)?status\s*=|\bupdate\([^)]*\bstatus\s*=|^\s*(?!self\.)[\w.]+\.status\s*=[^=])", re.IGNORECASE
    )
    offenders = []
    for app in ("taskforge", "queues", "workers", "dashboard"):
        for path in (root / app).rglob("*.py"):
            relative = path.relative_to(root).as_posix()
            if "/migrations/" in relative or relative in LIFECYCLE_STATEMENTS:
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{relative}:{number}: {line.strip()}")
    assert offenders == []


@pytest.mark.django_db
def test_replay_many_replays_every_given_id_beyond_one_batch():
    queue = QueueFactory(name="replays")
    dead = [TaskFactory(queue=queue, dead=True) for _ in range(5)]
    assert lifecycle.replay_many(queue, [task.id for task in dead], batch=2) == 5
    assert set(Task.objects.filter(queue=queue).values_list("status", flat=True)) == {"pending"}
