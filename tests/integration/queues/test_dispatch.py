"""Dispatch through the Redis priority lanes, confirmed in Postgres (real Redis, real Postgres)."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import taskforge.infra.redis
from queues.dispatch import lanes, outage
from queues.loops import dispatcher
from queues.management.commands.run_dispatcher import Command as DispatcherCommand
from queues.models import Queue, Task
from taskforge.infra.redis import redis_client
from tests.factories import QueueFactory, TaskFactory
from tests.integration.api.support import claim, enqueue
from tests.live import free_port

pytestmark = pytest.mark.django_db

# Inside a test's transaction Postgres' now() stays at the test's start: tasks made
# directly must be due well before it.
PAST = timezone.now() - timedelta(minutes=5)


def bulk_tasks(queue: Queue, count: int, **fields) -> list[Task]:
    return Task.objects.bulk_create(TaskFactory.build(queue=queue, scheduled_at=PAST, **fields) for _ in range(count))


def lane(name: str = "email_jobs") -> list[str]:
    return [member.decode() for member in redis_client().zrange(lanes.ready_key(name), 0, -1)]


@pytest.fixture
def redis_down(settings, monkeypatch):
    """Point this process at a port where no Redis listens."""
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setattr(taskforge.infra.redis, "_client", None)
    monkeypatch.setattr(outage, "_redis_down_until", 0.0)
    yield
    taskforge.infra.redis._client = None


@pytest.fixture(autouse=True)
def redis_breaker_closed(monkeypatch):
    monkeypatch.setattr(outage, "_redis_down_until", 0.0)


@pytest.fixture(autouse=True)
def after_commit_runs_at_once(monkeypatch):
    """The test's transaction never commits: run after-commit work (the Redis writes) at once.

    The lifecycle registers it as the last step of each move, so this is the
    order a real commit gives; the multi-process tests cover real commits.
    """
    monkeypatch.setattr(transaction, "on_commit", lambda func, using=None, robust=False: func())


# --- order ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_strict_priority_order_over_all_ten_priorities(producer, worker, queue):
    priorities = list(range(1, 11)) * 2
    random.Random(7).shuffle(priorities)
    for priority in priorities:
        enqueue(producer, priority=priority, payload={"p": priority})
    assert len(lane()) == 20  # the enqueues filled the lane; the claims below come from it
    claimed = [claim(worker, queue="email_jobs")[0]["priority"] for _ in range(20)]
    assert claimed == sorted(priorities)
    assert lane() == []


@pytest.mark.django_db(transaction=True)  # each enqueue its own transaction, so its own now()
def test_fifo_within_a_priority(producer, worker, queue):
    ids = [enqueue(producer, priority=4, payload={"n": n})["id"] for n in range(8)]
    assert [t["id"] for t in claim(worker, queue="email_jobs", max_tasks=3)] == ids[:3]
    assert [claim(worker, queue="email_jobs")[0]["id"] for _ in range(5)] == ids[3:]


def test_a_batch_claim_comes_back_in_priority_order(producer, worker, queue):
    for priority in (9, 2, 5, 1, 7):
        enqueue(producer, priority=priority)
    assert [t["priority"] for t in claim(worker, queue="email_jobs", max_tasks=10)] == [1, 2, 5, 7, 9]


def test_claim_without_queue_takes_lowest_priority_number_across_queues(producer, worker):
    QueueFactory(name="a")
    QueueFactory(name="b")
    enqueue(producer, "a", priority=5, payload={"q": "a5"})
    enqueue(producer, "b", priority=2, payload={"q": "b2"})
    enqueue(producer, "a", priority=1, payload={"q": "a1"})
    enqueue(producer, "b", priority=9, payload={"q": "b9"})
    assert [t["payload"]["q"] for t in claim(worker, max_tasks=3)] == ["a1", "b2", "a5"]
    assert [t["payload"]["q"] for t in claim(worker, max_tasks=3)] == ["b9"]


def test_lane_scores_order_priority_before_time():
    now = timezone.now()
    assert lanes.lane_score(1, now + timedelta(days=3000)) < lanes.lane_score(2, now)
    assert lanes.lane_score(3, now) < lanes.lane_score(3, now + timedelta(microseconds=10))
    assert lanes.lane_score(10, now + timedelta(days=36500)) < 2**53


# --- confirmation in Postgres ---------------------------------------------------------------------


def test_garbage_ids_in_the_lane_are_ignored_and_dropped(producer, worker, queue):
    real = enqueue(producer, priority=5)
    done = TaskFactory(queue=queue, done=True)
    best = lanes.lane_score(1, timezone.now() - timedelta(days=1))
    redis_client().zadd(
        lanes.ready_key("email_jobs"),
        {"not-a-uuid": best, str(uuid.uuid4()): best, str(done.id): best, "\xff\xfe": best},
    )
    tasks = claim(worker, queue="email_jobs", max_tasks=2)
    assert [t["id"] for t in tasks] == [real["id"]]
    assert lane() == []
    assert Task.objects.get(pk=done.id).status == "done"


def test_a_cancelled_task_in_the_lane_is_skipped_for_the_next(producer, worker, queue):
    first = enqueue(producer, priority=1)
    second = enqueue(producer, priority=2)
    assert producer.delete(f"/queues/email_jobs/tasks/{first['id']}").status_code == 200
    assert first["id"] in lane()  # still buffered: Redis is only a cache
    assert [t["id"] for t in claim(worker, queue="email_jobs")] == [second["id"]]
    assert Task.objects.get(pk=first["id"]).status == "cancelled"


def test_a_claimed_id_left_in_the_lane_is_never_claimed_twice(producer, worker, queue):
    task = enqueue(producer)
    (got,) = claim(worker, "w-1", queue="email_jobs")
    redis_client().zadd(lanes.ready_key("email_jobs"), {task["id"]: 0})  # a stale copy
    assert claim(worker, "w-2", queue="email_jobs") == []
    assert Task.objects.get(pk=got["id"]).claimed_by == "w-1"


def test_claim_falls_back_to_postgres_when_the_lane_is_empty(producer, worker, queue):
    ids = [enqueue(producer, priority=p)["id"] for p in (3, 1, 2)]
    redis_client().delete(lanes.ready_key("email_jobs"))
    assert [t["priority"] for t in claim(worker, queue="email_jobs", max_tasks=5)] == [1, 2, 3]
    assert {t.id for t in Task.objects.filter(status="claimed")} == {uuid.UUID(i) for i in ids}


def test_lane_and_postgres_together_fill_a_batch(producer, worker, queue):
    enqueue(producer, priority=1)
    TaskFactory.create_batch(3, queue=queue, priority=2, scheduled_at=PAST)  # in Postgres only
    assert len(lane()) == 1
    assert [t["priority"] for t in claim(worker, queue="email_jobs", max_tasks=10)] == [1, 2, 2, 2]


def test_pop_takes_a_lanes_best_ids_in_one_call_and_drops_garbage(queue):
    best, next_best = uuid.uuid4(), uuid.uuid4()
    key = lanes.ready_key("email_jobs")
    redis_client().zadd(key, {str(best): 1, "not-a-task": 2, str(next_best): 3, str(uuid.uuid4()): 4})
    assert lanes.pop("email_jobs", 3) == (3, [best, next_best])
    assert redis_client().zcard(key) == 1
    assert lanes.pop("nothing_here", 3) == (0, [])


def test_pop_short_takes_a_short_lane_whole_and_leaves_a_longer_one_alone(queue):
    key = lanes.ready_key("email_jobs")
    ids = [uuid.uuid4() for _ in range(3)]
    redis_client().zadd(key, {str(ids[0]): 1, "not-a-task": 2, str(ids[1]): 3, str(ids[2]): 4})

    assert lanes.pop_short("email_jobs", 3) is None  # four members: taken not at all
    assert redis_client().zcard(key) == 4
    assert lanes.pop_short("email_jobs", 4) == (4, ids)  # held four, garbage dropped, best first
    assert redis_client().zcard(key) == 0
    assert lanes.pop_short("email_jobs", 4) == (0, [])


def _claim_statements(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "FOR UPDATE OF t SKIP LOCKED" in q["sql"]]


def test_a_claim_the_lane_cannot_fill_scans_postgres_in_the_same_statement(producer, worker, queue):
    enqueue(producer, priority=1)
    TaskFactory.create_batch(3, queue=queue, priority=2, scheduled_at=PAST)  # in Postgres only
    with CaptureQueriesContext(connection) as queries:
        got = claim(worker, queue="email_jobs", max_tasks=10)
    assert [t["priority"] for t in got] == [1, 2, 2, 2]
    assert len(_claim_statements(queries)) == 1
    assert Task.objects.filter(status="claimed").count() == 4


def test_the_same_statement_makes_up_for_stale_lane_ids(producer, worker, queue):
    stale = enqueue(producer, priority=1)
    Task.objects.filter(pk=stale["id"]).update(status="cancelled")  # still in the lane
    TaskFactory.create_batch(2, queue=queue, priority=3, scheduled_at=PAST)
    with CaptureQueriesContext(connection) as queries:
        got = claim(worker, queue="email_jobs", max_tasks=5)
    assert [t["priority"] for t in got] == [3, 3]
    assert stale["id"] not in {t["id"] for t in got}
    assert len(_claim_statements(queries)) == 1


def test_a_full_lane_claim_does_not_scan(producer, worker, queue):
    for _ in range(3):
        enqueue(producer)
    TaskFactory.create_batch(2, queue=queue, priority=1, scheduled_at=PAST)  # would win a scan
    with CaptureQueriesContext(connection) as queries:
        got = claim(worker, queue="email_jobs", max_tasks=3)
    assert [t["priority"] for t in got] == [5, 5, 5]  # the lane's three: no scan was needed
    (statement,) = _claim_statements(queries)
    assert "scanned AS" not in statement


def test_a_topped_up_claim_across_queues_still_honours_a_rate_limit(producer, worker, queue):
    limited = QueueFactory(name="limited", rate_limit=1, rate_burst=1)
    TaskFactory.create_batch(3, queue=limited, priority=1, scheduled_at=PAST)  # in Postgres only
    enqueue(producer, priority=5)
    TaskFactory.create_batch(2, queue=queue, priority=4, scheduled_at=PAST)
    got = claim(worker, max_tasks=10)  # no queue: every unpaused queue
    by_queue = sorted(t["queue"] for t in got)
    assert by_queue == ["email_jobs"] * 3 + ["limited"]  # the burst of one, not three


def test_delayed_task_is_not_in_the_lane_and_not_claimable_early(producer, worker, queue):
    later = (timezone.now() + timedelta(minutes=5)).isoformat()
    task = enqueue(producer, scheduled_at=later)
    assert lane() == []
    assert claim(worker, queue="email_jobs") == []
    redis_client().zadd(lanes.ready_key("email_jobs"), {task["id"]: 0})  # even if pushed into the lane
    assert claim(worker, queue="email_jobs") == []
    assert Task.objects.get(pk=task["id"]).status == "pending"


# --- the dispatcher's refill ------------------------------------------------------------------


@pytest.fixture
def small_lanes(monkeypatch):
    """Lanes of 50 ids, refilled below 10: the same rules on fewer rows."""
    monkeypatch.setattr(lanes, "LANE_CAPACITY", 50)
    monkeypatch.setattr(lanes, "LANE_LOW_WATER", 10)
    monkeypatch.setattr(dispatcher, "HEAD_REFRESH", 5)


def test_refill_buffers_due_tasks_up_to_capacity(queue, small_lanes):
    bulk_tasks(queue, lanes.LANE_CAPACITY + 50)
    TaskFactory(queue=queue, scheduled_at=timezone.now() + timedelta(hours=1))
    assert dispatcher.refill_lanes() == lanes.LANE_CAPACITY
    assert len(lane()) == lanes.LANE_CAPACITY
    assert dispatcher.refill_lanes() == 0  # full: only the head is re-read, nothing new


def test_refill_tops_up_below_the_low_water_mark(producer, worker, queue, small_lanes):
    bulk_tasks(queue, lanes.LANE_CAPACITY + 200)
    dispatcher.refill_lanes()
    claimed = 0
    while len(lane()) >= lanes.LANE_LOW_WATER:
        claimed += len(claim(worker, queue="email_jobs", max_tasks=5))
    before = len(lane())
    dispatcher.refill_lanes()
    assert before < lanes.LANE_LOW_WATER < len(lane()) <= lanes.LANE_CAPACITY
    assert set(lane()).isdisjoint({str(t.id) for t in Task.objects.filter(status="claimed")})
    assert claimed == Task.objects.filter(status="claimed").count()


def test_refill_puts_a_missing_high_priority_task_at_the_head(worker, queue, small_lanes):
    bulk_tasks(queue, lanes.LANE_CAPACITY, priority=5)
    dispatcher.refill_lanes()
    urgent = TaskFactory(queue=queue, priority=1, scheduled_at=PAST)  # never announced: only Postgres knows
    dispatcher.refill_lanes()
    assert lane()[0] == str(urgent.id)
    assert claim(worker, queue="email_jobs")[0]["id"] == str(urgent.id)


def test_refill_skips_paused_queues(queue):
    TaskFactory.create_batch(3, queue=queue, scheduled_at=PAST)
    Queue.objects.filter(pk=queue.pk).update(paused=True)
    assert dispatcher.refill_lanes() == 0
    assert lane() == []


def test_enqueue_keeps_the_lane_bounded(producer, queue, small_lanes):
    tasks = [{"payload": {"n": n}} for n in range(lanes.LANE_CAPACITY + 20)]
    response = producer.post("/queues/email_jobs/tasks/batch", {"tasks": tasks}, format="json")
    assert response.status_code == 201
    assert len(lane()) == lanes.LANE_CAPACITY


# --- pause and resume ---------------------------------------------------------------------------


def test_paused_queue_accepts_tasks_but_dispatches_none(admin_api, producer, worker, queue):
    assert admin_api.patch("/queues/email_jobs", {"paused": True}, format="json").json()["paused"] is True
    ids = [enqueue(producer, payload={"n": n})["id"] for n in range(3)]
    assert claim(worker, queue="email_jobs", max_tasks=10) == []
    assert claim(worker, max_tasks=10) == []  # nor through a claim without queue
    assert admin_api.patch("/queues/email_jobs", {"paused": False}, format="json").status_code == 200
    assert sorted(t["id"] for t in claim(worker, queue="email_jobs", max_tasks=10)) == sorted(ids)


# --- Redis unreachable ------------------------------------------------------------------------------


def test_with_redis_down_unlimited_queues_flow_from_postgres(producer, worker, queue, redis_down, client):
    ids = [enqueue(producer, priority=p)["id"] for p in (2, 1)]  # enqueue still works
    assert [t["id"] for t in claim(worker, queue="email_jobs", max_tasks=5)] == ids[::-1]
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"] == {"postgres": "ok", "redis": "down"}


def test_with_redis_down_rate_limited_queues_dispatch_nothing(producer, worker, redis_down):
    QueueFactory(name="limited", rate_limit=100)
    QueueFactory(name="free")
    enqueue(producer, "limited", priority=1)
    free = enqueue(producer, "free", priority=9)
    assert claim(worker, queue="limited") == []
    assert [t["id"] for t in claim(worker, max_tasks=5)] == [free["id"]]
    assert Task.objects.filter(queue__name="limited", status="pending").count() == 1


def test_dispatcher_command_fills_lanes_and_survives_redis_down(queue, settings, monkeypatch):
    task = TaskFactory(queue=queue, scheduled_at=PAST)
    call_command("run_dispatcher", "--once")
    assert lane() == [str(task.id)]
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setattr(taskforge.infra.redis, "_client", None)
    assert DispatcherCommand().tick() == 0  # logged, not raised: no error backoff while Redis is away
    taskforge.infra.redis._client = None


def test_deleting_a_queue_drops_its_redis_keys(admin_api, producer, queue):
    task = enqueue(producer)
    redis_client().zadd(lanes.scheduled_key("email_jobs"), {"r|x": 1})
    assert producer.delete(f"/queues/email_jobs/tasks/{task['id']}").status_code == 200
    assert admin_api.delete("/queues/email_jobs").status_code == 204
    assert redis_client().keys("tf:{email_jobs}:*") == []
