"""The harness against a real API process, test database and Redis: preload, drain with
the harness's batching worker, and the exactly-once check that every drain figure rests on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from bench import config
from bench.context import Context
from bench.meter import Meter
from bench.procs import Supervisor
from bench.stack import Stack, descendants
from queues.apikeys import create_key
from queues.models import TaskEvent
from tests import live
from tests.factories import QueueFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def harness(live_stack, tmp_path: Path):
    supervisor = Supervisor(tmp_path)
    stack = Stack(
        server_database_url=live.test_database_url(),
        server_redis_url=settings.REDIS_URL,
        database_name=connection.settings_dict["NAME"],
        redis_db=int(settings.REDIS_URL.rsplit("/", 1)[1]) if settings.REDIS_URL.startswith("redis") else 0,
        web_concurrency=1,
        pool_size=4,
        python=str(Path(sys.executable)),
        supervisor=supervisor,
    )
    stack.api_url = live_stack.start_api()
    for role in ("producer", "worker"):
        stack.keys[role] = create_key(f"bench-{role}", role)[1]
    ctx = Context(cfg=config.from_env({}), stack=stack, supervisor=supervisor, log_dir=tmp_path)
    try:
        yield ctx
    finally:
        supervisor.stop_all()


def test_preloaded_tasks_are_drained_exactly_once_by_the_batch_worker(harness):
    queue = QueueFactory(name="bench_live")
    ids = harness.preload("bench_live", 120, batch=50)
    assert len(set(ids)) == 120
    workers = harness.start_workers("bench_live", kind="harness", processes=1, concurrency=2, max_tasks=50, wait=1)
    harness.wait_drained(queue.id, workers, timeout=60)
    harness.stop_workers(workers)
    result = harness.check_exactly_once("test", ids)
    assert result["tasks"] == result["done"] == result["done_exactly_once"] == 120
    assert result["first_claim"] <= result["last_done"]


def test_a_task_done_twice_fails_the_exactly_once_check(harness):
    queue = QueueFactory(name="bench_dup")
    ids = harness.preload("bench_dup", 3)
    workers = harness.start_workers("bench_dup", kind="harness", processes=1, concurrency=1, max_tasks=10, wait=1)
    harness.wait_drained(queue.id, workers, timeout=60)
    harness.stop_workers(workers)
    TaskEvent.objects.create(
        task_id=ids[0], queue_id=queue.id, at=timezone.now(), from_status="executing", to_status="done"
    )
    with pytest.raises(RuntimeError, match="exactly once"):
        harness.check_exactly_once("test", ids)


def test_the_meter_counts_the_bench_databases_own_commits_and_wal(harness):
    try:
        with harness.stack.connect() as pg:
            pg.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    except psycopg.Error as exc:
        pytest.skip(f"no pg_walinspect on this server: {exc}")
    QueueFactory(name="bench_meter")
    meter = Meter(harness.stack).start()
    harness.preload("bench_meter", 300, batch=100)
    reading = meter.stop()
    assert reading.database_wal is not None, reading.notes
    # Three batch requests, each one transaction; the loops may commit a few of their own meanwhile.
    assert reading.database_wal.commits >= 3
    assert 300 * 100 < reading.database_wal.bytes <= reading.wal_bytes
    assert "postgres" in reading.cpu and reading.seconds > 0
    assert reading.redis_commands is None  # the test Redis is shared: its counters count others too


def test_stop_all_ends_every_process_of_a_child_tree(tmp_path):
    supervisor = Supervisor(tmp_path)
    child = supervisor.spawn("tree", ["sh", "-c", "sleep 60 & sleep 60 & wait"], dict(os.environ))
    deadline = time.monotonic() + 5
    while len(descendants(child.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    tree = {pid: _state_and_start(pid) for pid in descendants(child.pid)}
    assert len(tree) == 3 and None not in tree.values()
    supervisor.stop_all()
    for pid, before in tree.items():
        after = _state_and_start(pid)
        # Gone, or the pid was reaped and handed to a new process (another start time).
        if after is None or after[1] != before[1]:
            continue
        assert after[0] == "Z", f"process {pid} survived stop_all (state {after[0]})"
    assert supervisor.children == []


def _state_and_start(pid: int) -> tuple[str, int] | None:
    """A process's state and start time (clock ticks after boot), None once it is gone (proc(5))."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[19])


def test_children_die_with_a_killed_harness(tmp_path):
    """PR_SET_PDEATHSIG: even a SIGKILLed harness leaves no process behind."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from bench.procs import Supervisor\n"
        "child = Supervisor(Path(sys.argv[1])).spawn('sleeper', ['sleep', '60'], {})\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    harness = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    sleeper = int(harness.stdout.readline())
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(sleeper, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(sleeper, signal.SIGKILL)
    pytest.fail("the child outlived a SIGKILLed harness")
