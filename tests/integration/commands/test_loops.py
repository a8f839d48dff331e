"""The background loops: one tick called directly, ``--once``, and real processes stopped by signals."""

from __future__ import annotations

import json
import signal
import time
from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from queues.loops import scheduler, watchdog
from queues.management.commands import run_dispatcher, run_scheduler, run_watchdog
from queues.models import DeadLetterTask, Status, Task, TaskEvent
from taskforge.infra.loop import LoopCommand
from tests.factories import QueueFactory, TaskFactory

# --- scheduler ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_scheduler_tick_promotes_due_retries_only():
    queue = QueueFactory(name="sched")
    due = TaskFactory.create_batch(3, queue=queue, retry_due=True)
    later = TaskFactory(queue=queue, retry_due=True, scheduled_at=timezone.now() + timedelta(minutes=10))
    handled = run_scheduler.Command().tick()
    assert handled >= 3
    statuses = dict(Task.objects.values_list("id", "status"))
    assert [statuses[t.id] for t in due] == [Status.PENDING] * 3
    assert statuses[later.id] == Status.RETRY
    promoted = TaskEvent.objects.filter(from_status="retry", to_status="pending")
    assert sorted(promoted.values_list("task_id", flat=True)) == sorted(t.id for t in due)


@pytest.mark.django_db
def test_scheduler_tick_with_nothing_to_do():
    QueueFactory(name="idle")
    assert run_scheduler.Command().tick() == 0


@pytest.mark.django_db
def test_scheduler_once():
    task = TaskFactory(queue=QueueFactory(name="once"), retry_due=True)
    call_command("run_scheduler", "--once")
    task.refresh_from_db()
    assert task.status == Status.PENDING


@pytest.mark.django_db(transaction=True)  # real commits: the scheduler's queries use Postgres' now()
def test_scheduler_runs_its_postgres_tier_again_at_once_only_after_a_full_promotion_batch(monkeypatch):
    monkeypatch.setattr(scheduler, "PROMOTE_BATCH", 2)
    queue = QueueFactory(name="batch")
    TaskFactory.create_batch(3, queue=queue, scheduled_at=timezone.now() + timedelta(seconds=1))
    command = run_scheduler.Command()
    assert command.tick() == 3  # three loaded into the scheduled set: not a promotion batch
    assert not command.more_work_pending(3)
    TaskFactory.create_batch(3, queue=queue, retry_due=True)
    command.next_slow_tier = 0.0
    command.tick()
    assert command.last.promoted == 2
    assert command.more_work_pending(command.last.handled)  # more retries may be due
    command.tick()
    assert not command.more_work_pending(command.last.handled)
    assert set(Task.objects.values_list("status", flat=True)) == {Status.PENDING}


# --- watchdog ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_watchdog_tick_expires_lapsed_leases(settings):
    queue = QueueFactory(name="wd", retry_base_ms=1000)
    lapsed = TaskFactory(queue=queue, expired_lease=True, attempts=1, max_retries=3)
    last_try = TaskFactory(queue=queue, expired_lease=True, attempts=4, max_retries=3)
    healthy = TaskFactory(queue=queue, claimed=True)
    command = run_watchdog.Command()
    assert command.tick() == 2
    lapsed.refresh_from_db()
    last_try.refresh_from_db()
    healthy.refresh_from_db()
    assert lapsed.status == Status.RETRY
    assert lapsed.last_error.startswith("lease expired")
    assert f"{settings.TASKFORGE_HEARTBEAT_TIMEOUT}s" in lapsed.last_error
    assert last_try.status == Status.DEAD
    assert DeadLetterTask.objects.filter(pk=last_try.pk).exists()
    assert healthy.status == Status.CLAIMED
    assert command.tick() == 0  # nothing left


@pytest.mark.django_db
def test_watchdog_tick_prunes_finished_tasks_past_retention(settings):
    settings.TASKFORGE_RETENTION_DAYS = 7
    queue = QueueFactory(name="prune")
    old = timezone.now() - timedelta(days=7, minutes=1)
    recent = timezone.now() - timedelta(days=6)
    old_done = TaskFactory(queue=queue, done=True, finished_at=old)
    old_cancelled = TaskFactory(queue=queue, status=Status.CANCELLED, finished_at=old)
    kept_done = TaskFactory(queue=queue, done=True, finished_at=recent)
    kept_dead = TaskFactory(queue=queue, dead=True, updated_at=old)
    kept_pending = TaskFactory(queue=queue, created_at=old)
    TaskEvent.objects.create(task=old_done, queue=queue, at=old, from_status="claimed", to_status="done")
    assert run_watchdog.Command().tick() == 2
    remaining = set(Task.objects.values_list("id", flat=True))
    assert remaining == {kept_done.id, kept_dead.id, kept_pending.id}
    assert old_cancelled.id not in remaining
    # Its history is not deleted row by row: it goes with its day's partition
    # (tests/integration/queues/test_event_partitions.py).
    assert TaskEvent.objects.filter(task_id=old_done.id).exists()


@pytest.mark.django_db
def test_watchdog_passes_again_at_once_after_a_full_batch(monkeypatch):
    monkeypatch.setattr(watchdog, "EXPIRE_BATCH", 2)
    TaskFactory.create_batch(3, queue=QueueFactory(name="wd"), expired_lease=True)
    assert watchdog.run_once() == watchdog.Sweep(expired=2, pruned=0)
    command = run_watchdog.Command()
    assert command.tick() == 1
    assert not command.more_work_pending(1)


@pytest.mark.django_db
def test_watchdog_once():
    task = TaskFactory(queue=QueueFactory(name="once"), expired_lease=True)
    call_command("run_watchdog", "--once")
    task.refresh_from_db()
    assert task.status == Status.RETRY


# --- dispatcher ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_dispatcher_once_and_tick():
    TaskFactory.create_batch(2, queue=QueueFactory(name="lanes"))
    call_command("run_dispatcher", "--once")
    assert run_dispatcher.Command().tick() >= 0
    # Dispatching only fills Redis: nothing moves in Postgres.
    assert set(Task.objects.values_list("status", flat=True)) == {Status.PENDING}


# --- the loop base -------------------------------------------------------------------------------------


class FlakyLoop(LoopCommand):
    loop_name = "flaky"
    interval = 0.01

    def __init__(self) -> None:
        super().__init__(stdout=StringIO(), stderr=StringIO())
        self.ticks = 0

    def tick(self) -> int:
        self.ticks += 1
        if self.ticks == 1:
            raise RuntimeError("first tick fails")
        if self.ticks == 3:
            self.stopping = True
        return 1


@pytest.mark.django_db
def test_a_failing_tick_is_logged_and_retried_not_fatal(caplog):
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    loop = FlakyLoop()
    try:
        started = time.monotonic()
        loop.handle()
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
    assert loop.ticks == 3
    assert time.monotonic() - started < 5
    assert any("tick failed" in record.getMessage() for record in caplog.records)


# --- real processes: SIGTERM and SIGINT stop them promptly, exit 0 -----------------------------------


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_loops_exit_zero_promptly_on_signal(live_stack):
    TaskFactory(queue=QueueFactory(name="live"), retry_due=True)
    # Long intervals: a prompt exit proves the loops sleep in short slices.
    env = {"TASKFORGE_WATCHDOG_INTERVAL": "3600", "TASKFORGE_SCHEDULER_TICK": "60", "DJANGO_LOG_FORMAT": "json"}
    commands = ["run_scheduler", "run_dispatcher", "run_watchdog"]
    signals = [signal.SIGTERM, signal.SIGINT, signal.SIGTERM]  # Ctrl-C is a stop too
    processes = [live_stack.start_loop(command, extra_env=env) for command in commands]
    logs = live_stack.logs[-len(commands) :]
    for command, log in zip(commands, logs, strict=True):
        name = command.removeprefix("run_")
        assert wait_for(lambda log=log, name=name: f"{name} started" in log.read_text(errors="replace"), 60), (
            live_stack.output()
        )
    for process in processes:
        assert process.poll() is None, live_stack.output()
    # The scheduler did its work while running.
    assert wait_for(lambda: Task.objects.filter(status=Status.PENDING).exists(), 10)
    for process, sig in zip(processes, signals, strict=True):
        process.send_signal(sig)
    signalled_at = time.time()
    codes = [process.wait(timeout=30) for process in processes]
    assert codes == [0, 0, 0], live_stack.output()
    for command, log in zip(commands, logs, strict=True):
        stopped = [line for line in log.read_text(errors="replace").splitlines() if '"loop.stop"' in line]
        assert stopped, live_stack.output()
        # The loop itself reacts within a sleep slice or a tick, even with an hour-long interval
        # (interpreter shutdown after that is not the loop's doing, and slow on a busy machine).
        stopped_at = datetime.fromisoformat(json.loads(stopped[-1])["ts"]).timestamp()
        assert stopped_at - signalled_at < 3, command
