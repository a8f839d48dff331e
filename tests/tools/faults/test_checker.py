"""The fault checker catches what it is there to catch (and passes a clean history)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from faults import checker
from queues.lifecycle import decide
from queues.models import Status, Task, TaskEvent
from tests import live
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)
LEASE = 5.0
T0 = timezone.now() - timedelta(minutes=5)


def _task(queue, *, status=Status.DONE, worker="w-1", lease="L1", attempts=1, max_retries=3, result=True, events=()):
    task = TaskFactory(
        queue=queue,
        status=status,
        claimed_by=worker,
        lease_token=lease,
        attempts=attempts,
        max_retries=max_retries,
        result={"lease": lease, "worker": worker} if result else None,
    )
    TaskEvent.objects.bulk_create(
        TaskEvent(task_id=task.id, queue_id=queue.id, kind=kind, at=T0 + timedelta(seconds=at), from_status=src,
                  to_status=dst, worker_id=who, detail=detail[0] if detail else None)
        for kind, at, src, dst, who, *detail in events
    )  # fmt: skip
    return str(task.id)


def _healthy_events(worker="w-1"):
    return [
        ("transition", 0, None, "pending", None),
        ("transition", 1, "pending", "claimed", worker),
        ("transition", 2, "claimed", "executing", worker),
        ("heartbeat", 5, "executing", "executing", worker),
        ("transition", 8, "executing", "done", worker),
    ]


def _exec_dir(tmp_path: Path, runs) -> Path:
    path = tmp_path / "exec"
    path.mkdir()
    lines = []
    for task_id, worker, lease, start, end in runs:
        common = {"task": task_id, "lease": lease, "worker": worker}
        lines.append({"e": "start", "mono": start, **common})
        if end is not None:
            lines.append({"e": "end", "mono": end, "outcome": "ok", **common})
    (path / "exec-1.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _check(queue, accepted, tmp_path, runs=()):
    executions = checker.read_executions(_exec_dir(tmp_path, runs), T0.timestamp())
    return checker.check_queue(live.test_database_url(), queue.name, accepted, executions, LEASE)


def test_a_clean_history_passes(tmp_path):
    queue = QueueFactory(name="clean")
    task = _task(queue, events=_healthy_events())
    result = _check(queue, {task: False}, tmp_path, [(task, "w-1", "L1", 1.5, 7.5)])
    assert result.ok, dict(result.violations)
    assert (result.tasks, result.done, result.lost, result.duplicate_executions) == (1, 1, 0, 0)


def test_a_missing_or_unfinished_accepted_task_is_lost_and_stuck(tmp_path):
    queue = QueueFactory(name="lost")
    pending = _task(queue, status=Status.PENDING, result=False, events=[("transition", 0, None, "pending", None)])
    result = _check(queue, {pending: False, "00000000-0000-0000-0000-000000000000": False}, tmp_path)
    assert result.lost == 2
    assert result.stuck == 1
    assert {"lost", "stuck"} <= set(result.violations)


def test_an_ack_from_a_worker_that_does_not_hold_the_lease_is_flagged(tmp_path):
    queue = QueueFactory(name="stale")
    events = [*_healthy_events()[:3], ("transition", 4, "executing", "done", "w-2")]
    task = _task(queue, worker="w-2", events=events)
    result = _check(queue, {task: False}, tmp_path)
    assert "no stale heartbeat/ack/nack accepted" in result.violations


def test_a_heartbeat_after_the_lease_ran_out_is_flagged(tmp_path):
    queue = QueueFactory(name="late")
    events = [
        ("transition", 0, None, "pending", None),
        ("transition", 1, "pending", "claimed", "w-1"),
        ("transition", 1 + LEASE + 1, "claimed", "executing", "w-1"),
        ("transition", 9, "executing", "done", "w-1"),
    ]
    result = _check(queue, {_task(queue, events=events): False}, tmp_path)
    assert "no stale heartbeat/ack/nack accepted" in result.violations


def test_a_lease_expired_early_and_a_second_claim_while_held_are_flagged(tmp_path):
    queue = QueueFactory(name="overlap")
    early = [
        ("transition", 0, None, "pending", None),
        ("transition", 1, "pending", "claimed", "w-1"),
        ("transition", 2, "claimed", "retry", None),  # the watchdog, 4 s before the lease ended
        ("transition", 3, "retry", "pending", None),
        ("transition", 4, "pending", "claimed", "w-2"),
        ("transition", 5, "claimed", "done", "w-2"),
    ]
    double = [
        ("transition", 0, None, "pending", None),
        ("transition", 1, "pending", "claimed", "w-1"),
        ("transition", 2, "pending", "claimed", "w-2"),
        ("transition", 3, "claimed", "done", "w-2"),
    ]
    tasks = {
        _task(queue, worker="w-2", attempts=2, events=early): False,
        _task(queue, worker="w-2", events=double): False,
    }
    result = _check(queue, tasks, tmp_path)
    assert "no healthy lease expired" in result.violations
    assert "leases never overlap" in result.violations
    assert "consistent history" in result.violations


def test_dead_with_the_wrong_number_of_attempts_and_two_terminals_are_flagged(tmp_path):
    queue = QueueFactory(name="dead")
    events = [
        ("transition", 0, None, "pending", None),
        ("transition", 1, "pending", "claimed", "w-1"),
        ("transition", 2, "claimed", "dead", "w-1"),
        ("transition", 3, "dead", "done", "w-1"),
    ]
    task = _task(queue, status=Status.DEAD, attempts=1, max_retries=3, result=False, events=events)
    result = _check(queue, {task: True}, tmp_path)
    assert "dead after exactly 1 + max_retries attempts" in result.violations
    assert "one terminal transition" in result.violations


@pytest.mark.parametrize("released", [True, False])
def test_a_released_hand_back_is_no_failed_attempt(tmp_path, released):
    queue = QueueFactory(name=f"released_{released}".lower())
    detail = f"{checker.RELEASED_DETAIL_PREFIX if released else ''}worker shutting down"
    events = [
        ("transition", 0, None, "pending", None),
        ("transition", 1, "pending", "claimed", "w-1"),
        ("transition", 2, "claimed", "retry", "w-1", detail),
        ("transition", 3, "retry", "pending", None),
        ("transition", 4, "pending", "claimed", "w-2"),
        ("transition", 5, "claimed", "dead", "w-2", "boom"),
    ]
    task = _task(queue, status=Status.DEAD, worker="w-2", attempts=1, max_retries=0, result=False, events=events)
    result = _check(queue, {task: True}, tmp_path)
    # Handed back unstarted (its attempt given back): one failed attempt, as max_retries 0 allows.
    assert ("dead after exactly 1 + max_retries attempts" in result.violations) is not released


def test_the_checker_reads_releases_as_the_lifecycle_writes_them():
    assert checker.RELEASED_DETAIL_PREFIX == decide.RELEASED_DETAIL_PREFIX


def test_an_execution_by_a_worker_never_granted_the_task_is_flagged_and_reruns_are_counted(tmp_path):
    queue = QueueFactory(name="runs")
    task = _task(queue, events=_healthy_events())
    runs = [(task, "w-1", "L1", 1.5, 3.0), (task, "w-1", "L1b", 4.0, 7.0), (task, "w-9", "L9", 2.0, 2.5)]
    result = _check(queue, {task: False}, tmp_path, runs)
    assert "executions run under a granted lease" in result.violations
    assert result.duplicate_executions == 2


# --- push queues: the receiver's deliveries stand for the executions -------------------------------


def _deliveries(tmp_path: Path, lines) -> Path:
    path = tmp_path / "deliveries.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"e": e, "mono": mono, "task": task_id, "attempt": attempt, **({"outcome": "ok"} if e == "end" else {})}
            )
            + "\n"
            for e, mono, task_id, attempt in lines
        )
    )
    return path


def _check_push(queue, accepted, tmp_path, lines):
    deliveries = checker.read_deliveries(_deliveries(tmp_path, lines), T0.timestamp())
    return checker.check_queue(live.test_database_url(), queue.name, accepted, deliveries, LEASE, push=True)


def _push_task(queue, *, attempts, events, result_attempt=None):
    task_id = _task(queue, worker="pusher-1", attempts=attempts, result=False, events=events)
    Task.objects.filter(id=task_id).update(result={"task": task_id, "attempt": result_attempt or attempts})
    return task_id


def _redelivered_events():
    # Claimed by a pusher that was killed mid-delivery: the lease expires, another pusher delivers.
    return [
        ("transition", 0, None, "pending", None),
        ("transition", 1, "pending", "claimed", "pusher-1"),
        ("transition", 1 + LEASE + 0.5, "claimed", "retry", None),
        ("transition", 7, "retry", "pending", None),
        ("transition", 8, "pending", "claimed", "pusher-2"),
        ("transition", 9, "claimed", "done", "pusher-2"),
    ]


def test_a_killed_pushers_delivery_and_its_redelivery_pass_and_count_as_a_duplicate(tmp_path):
    queue = QueueFactory(name="push_clean")
    task = _push_task(queue, attempts=2, events=_redelivered_events())
    # Attempt 1 reached the receiver and was answered, but its pusher died before the ack.
    lines = [("start", 1.2, task, 1), ("end", 1.5, task, 1), ("start", 8.1, task, 2), ("end", 8.4, task, 2)]
    result = _check_push(queue, {task: False}, tmp_path, lines)
    assert result.ok, dict(result.violations)
    assert (result.done, result.lease_expiries, result.executions, result.duplicate_executions) == (1, 1, 2, 1)


def test_a_delivery_without_its_claim_or_twice_under_one_lease_is_flagged(tmp_path):
    queue = QueueFactory(name="push_bad")
    task = _push_task(queue, attempts=2, events=_redelivered_events())
    lines = [
        ("start", 0.5, task, 1),  # before attempt 1 was claimed
        ("start", 8.1, task, 2), ("end", 8.2, task, 2),
        ("start", 8.3, task, 2), ("end", 8.4, task, 2),  # the same lease delivered again
        ("start", 8.5, task, 3),  # an attempt that was never claimed
    ]  # fmt: skip
    result = _check_push(queue, {task: False}, tmp_path, lines)
    assert "deliveries made under a granted lease" in result.violations
    assert "one delivery per lease" in result.violations


def test_a_push_result_that_is_not_the_answer_to_the_last_attempt_is_flagged(tmp_path):
    queue = QueueFactory(name="push_stale")
    task = _push_task(queue, attempts=2, events=_redelivered_events(), result_attempt=1)
    lines = [("start", 1.2, task, 1), ("end", 1.5, task, 1), ("start", 8.1, task, 2), ("end", 8.4, task, 2)]
    result = _check_push(queue, {task: False}, tmp_path, lines)
    assert "no stale ack accepted" in result.violations


def test_deliveries_are_read_one_run_each_and_a_cut_one_has_no_end(tmp_path):
    lines = [("start", 1.0, "t", 1), ("start", 2.0, "t", 2), ("end", 2.5, "t", 2), ("start", 3.0, "u", 1)]
    got = checker.read_deliveries(_deliveries(tmp_path, lines), 100.0)
    assert [(r["attempt"], r["start"], r["end"]) for r in got["t"]] == [(1, 101.0, None), (2, 102.0, 102.5)]
    assert [r["end"] for r in got["u"]] == [None]
    assert checker.read_deliveries(tmp_path / "missing.jsonl", 0.0) == {}
