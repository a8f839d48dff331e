"""Reading and waiting for results (API.md "Additions (v2)"): ``GET /tasks/{id}`` and ``wait_seconds``.

The waits run for real: a request waits in its own thread (its own connection
and event loop) while this thread settles the task through the API, with
real commits, so the result bell rings as in production.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection
from rest_framework.test import APIClient

import taskforge.infra.redis
from queues import lifecycle
from queues.apikeys import create_key
from queues.dispatch import doorbell, outage
from tests.contract import TASK_FIELDS
from tests.factories import QueueFactory, TaskFactory
from tests.integration.api.support import assert_error, claim, enqueue, post
from tests.integration.workers.test_long_poll import _threads, _worker_pid
from tests.live import free_port

pytestmark = pytest.mark.django_db(transaction=True)

TASK_WITH_HISTORY = {*TASK_FIELDS, "history"}


class Read(threading.Thread):
    """One GET of a task in its own thread, timed."""

    def __init__(self, key: str, path: str) -> None:
        super().__init__()
        self.key, self.path = key, path
        self.response = None
        self.seconds = 0.0

    def run(self) -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.key}")
        started = time.monotonic()
        try:
            self.response = client.get(self.path)
        finally:
            self.seconds = time.monotonic() - started
            connection.close()

    def body(self) -> dict:
        self.join(40)
        assert self.response is not None and self.response.status_code == 200, self.response
        return self.response.json()


def waiting(read: Read, settle: float = 0.7) -> Read:
    read.start()
    time.sleep(settle)  # past its first attempts, waiting on the doorbell
    assert read.is_alive()
    return read


@pytest.fixture
def producer_key(make_key: Callable[[str], str]) -> str:
    return make_key("producer")


# --- GET /tasks/{id} ---------------------------------------------------------------------------


def test_a_task_is_read_by_id_whatever_its_queue(producer, queue):
    QueueFactory(name="other")
    mine = enqueue(producer, kind="a.b")
    theirs = enqueue(producer, "other")
    for task, queue_name in ((mine, "email_jobs"), (theirs, "other")):
        response = producer.get(f"/tasks/{task['id']}")
        assert response.status_code == 200, response.content
        body = response.json()
        assert set(body) == TASK_WITH_HISTORY
        assert body["queue"] == queue_name and body["id"] == task["id"]
        assert body["history"] == producer.get(f"/queues/{queue_name}/tasks/{task['id']}").json()["history"]
        assert [(h["from_status"], h["to_status"]) for h in body["history"]] == [(None, "pending")]
    assert producer.get(f"/tasks/{mine['id']}/").json()["kind"] == "a.b"  # trailing slash answered directly


@pytest.mark.parametrize("raw", ["6d1f7a1e-2b0c-4c3e-9f55-0c1f5e8b7a10", "not-a-uuid", "1234"])
def test_an_unknown_or_malformed_id_is_404(producer, raw):
    assert_error(producer.get(f"/tasks/{raw}"), 404, "not_found")


def test_roles_and_auth_order_of_the_read_by_id(client_for, queue):
    task = TaskFactory(queue=queue)
    assert_error(APIClient().get(f"/tasks/{task.id}"), 401, "unauthorized")
    assert_error(APIClient().get(f"/tasks/{uuid.uuid4()}?wait_seconds=99"), 401, "unauthorized")
    worker = client_for("worker")
    assert_error(worker.get(f"/tasks/{task.id}"), 403, "forbidden")
    assert_error(worker.get(f"/tasks/{uuid.uuid4()}"), 403, "forbidden")  # 403 before 404
    assert_error(worker.get(f"/queues/email_jobs/tasks/{task.id}?wait_seconds=1"), 403, "forbidden")
    for role in ("producer", "admin"):
        assert client_for(role).get(f"/tasks/{task.id}").status_code == 200
    producer = client_for("producer")
    for method in ("post", "put", "patch", "delete"):
        assert_error(getattr(producer, method)(f"/tasks/{task.id}"), 405, "method_not_allowed")


# --- wait_seconds: bad input -------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "31", "1.5", "x", "", "%2B5", "1e1", "true", "99999999"])
@pytest.mark.parametrize("prefix", ["/tasks/", "/queues/email_jobs/tasks/"])
def test_a_malformed_wait_seconds_is_400(producer, queue, prefix, value):
    task = TaskFactory(queue=queue)
    response = producer.get(f"{prefix}{task.id}?wait_seconds={value}")
    assert_error(response, 400, "validation_error", fields=["wait_seconds"])


@pytest.mark.parametrize("prefix", ["/tasks/", "/queues/email_jobs/tasks/"])
def test_an_unknown_query_parameter_is_400(producer, queue, prefix):
    task = TaskFactory(queue=queue)
    assert_error(producer.get(f"{prefix}{task.id}?wait=5"), 400, "validation_error", fields=["wait"])


def test_unknown_queue_and_unknown_task_are_404_even_with_a_wait(producer, queue):
    task = TaskFactory(queue=queue)
    assert_error(producer.get(f"/queues/nope/tasks/{task.id}?wait_seconds=5"), 404, "not_found")
    QueueFactory(name="other")
    assert_error(producer.get(f"/queues/other/tasks/{task.id}?wait_seconds=5"), 404, "not_found")
    assert_error(producer.get(f"/tasks/{uuid.uuid4()}?wait_seconds=5"), 404, "not_found")


# --- wait_seconds: answers ---------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["/tasks/", "/queues/email_jobs/tasks/"])
@pytest.mark.parametrize("traits", [{"done": True}, {"dead": True}, {"status": "cancelled"}], ids=str)
def test_a_settled_task_is_answered_at_once(producer_key, queue, prefix, traits):
    task = TaskFactory(queue=queue, **traits)
    read = Read(producer_key, f"{prefix}{task.id}?wait_seconds=30")
    read.start()
    body = read.body()
    assert body["status"] == task.status and set(body) == TASK_WITH_HISTORY
    assert read.seconds < 10  # not the 30 s wait


def test_wait_seconds_0_answers_at_once(producer, queue):
    task = TaskFactory(queue=queue)
    response = producer.get(f"/tasks/{task.id}?wait_seconds=0")
    assert response.status_code == 200 and response.json()["status"] == "pending"


def test_an_unsettled_task_is_answered_as_it_is_when_the_wait_is_over(producer_key, queue):
    task = TaskFactory(queue=queue, claimed=True)
    read = Read(producer_key, f"/queues/email_jobs/tasks/{task.id}?wait_seconds=1")
    read.start()
    body = read.body()
    assert body["status"] == "claimed" and set(body) == TASK_WITH_HISTORY
    assert read.seconds >= 0.9


@pytest.mark.parametrize("prefix", ["/tasks/", "/queues/email_jobs/tasks/"])
def test_an_ack_ends_the_wait_with_the_result(producer_key, producer, worker, queue, prefix):
    created = enqueue(producer)
    (task,) = claim(worker, queue="email_jobs")
    read = waiting(Read(producer_key, f"{prefix}{created['id']}?wait_seconds=20"))
    lease = {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"]}
    assert post(worker, "/workers/ack", {**lease, "result": {"sent": True}}).status_code == 200
    body = read.body()
    assert (body["status"], body["result"]) == ("done", {"sent": True})
    assert [h["to_status"] for h in body["history"]] == ["pending", "claimed", "done"]
    assert read.seconds < doorbell.CONNECTED_RECHECK_SECONDS  # woken by its bell, not by the re-check timer


def test_a_last_nack_ends_the_wait_dead_and_a_retry_does_not(producer_key, producer, worker, queue):
    created = enqueue(producer, max_retries=1)
    (task,) = claim(worker, queue="email_jobs")
    read = waiting(Read(producer_key, f"/tasks/{created['id']}?wait_seconds=2"))
    lease = {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"]}
    assert post(worker, "/workers/nack", {**lease, "error": "boom", "retry_after_seconds": 0}).json()["status"] == (
        "retry"
    )
    body = read.body()
    assert body["status"] in ("retry", "pending")  # not settled: the wait ran to its end
    assert read.seconds >= 1.9
    lifecycle.promote_due()  # the scheduler's move: retry -> pending, due at once
    read = waiting(Read(producer_key, f"/tasks/{created['id']}?wait_seconds=20"))
    (task,) = claim(worker, queue="email_jobs")
    lease = {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"]}
    assert post(worker, "/workers/nack", {**lease, "error": "boom again"}).json()["status"] == "dead"
    body = read.body()
    assert (body["status"], body["last_error"]) == ("dead", "boom again")
    assert read.seconds < doorbell.CONNECTED_RECHECK_SECONDS


def test_acks_racing_the_start_of_each_wait_still_end_it_by_the_bell(producer_key, make_key, producer, worker, queue):
    """A wait marks its task awaited before its last look (lifecycle.await_result); the acks race that.

    Each ack comes 0-90 ms after its read began: before its first attempt,
    between it and the mark, or once it waits. Whichever: the read sees the
    task done, or the ack saw the mark and rang; none waits for the re-check.
    """
    worker_key = make_key("worker")
    for _ in range(16):
        enqueue(producer)
    leases = claim(worker, queue="email_jobs", max_tasks=16)
    assert len(leases) == 16

    def ack_after(task: dict, delay: float) -> int:
        time.sleep(delay)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {worker_key}")
        lease = {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"]}
        try:
            return post(client, "/workers/ack", {**lease, "result": {"n": task["id"]}}).status_code
        finally:
            connection.close()

    reads = [Read(producer_key, f"/tasks/{task['id']}?wait_seconds=20") for task in leases]
    with ThreadPoolExecutor(len(leases)) as pool:
        acks = []
        for n, (read, task) in enumerate(zip(reads, leases, strict=True)):
            read.start()
            acks.append(pool.submit(ack_after, task, 0.006 * n))
        assert [ack.result() for ack in acks] == [200] * len(leases)
    for read, task in zip(reads, leases, strict=True):
        body = read.body()
        assert (body["status"], body["result"]) == ("done", {"n": task["id"]})
        assert read.seconds < doorbell.CONNECTED_RECHECK_SECONDS, read.seconds


def test_a_cancel_ends_the_wait(producer_key, producer, queue):
    created = enqueue(producer)
    read = waiting(Read(producer_key, f"/tasks/{created['id']}?wait_seconds=20"))
    assert producer.delete(f"/queues/email_jobs/tasks/{created['id']}").status_code == 200
    assert read.body()["status"] == "cancelled"
    assert read.seconds < doorbell.CONNECTED_RECHECK_SECONDS


def test_many_waiters_on_one_task_are_all_woken_and_others_are_not(producer_key, producer, worker, queue):
    created = enqueue(producer)
    other = enqueue(producer, priority=10)
    (task,) = claim(worker, queue="email_jobs")
    assert task["id"] == created["id"]
    readers = [Read(producer_key, f"/tasks/{created['id']}?wait_seconds=20") for _ in range(3)]
    bystander = Read(producer_key, f"/tasks/{other['id']}?wait_seconds=3")
    for read in [*readers, bystander]:
        read.start()
    time.sleep(0.7)
    lease = {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"]}
    assert post(worker, "/workers/ack", lease).status_code == 200
    assert all(
        read.body()["status"] == "done" and read.seconds < doorbell.CONNECTED_RECHECK_SECONDS for read in readers
    )
    assert bystander.body()["status"] == "pending" and bystander.seconds >= 2.9


def test_with_redis_down_a_wait_still_ends_from_postgres(producer_key, producer, queue, settings, monkeypatch):
    created = enqueue(producer)
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setattr(taskforge.infra.redis, "_client", None)
    monkeypatch.setattr(outage, "_redis_down_until", 0.0)
    read = waiting(Read(producer_key, f"/tasks/{created['id']}?wait_seconds=10"), settle=1.5)
    assert producer.delete(f"/queues/email_jobs/tasks/{created['id']}").status_code == 200  # no bell rings
    assert read.body()["status"] == "cancelled"
    assert read.seconds < 1.5 + doorbell.DISCONNECTED_RECHECK_SECONDS + 2


# --- against the production server ------------------------------------------------------------


@pytest.mark.slow
def test_waiting_reads_hold_no_thread_and_no_database_connection(live_stack):
    """One API process (4 database connections, 4 threads), 60 reads waiting on one task: other calls are
    served at once, and the ack wakes every reader. GETs are served by the lean edge, HEADs by Django's
    (LongPoll attempts): neither holds a thread or a connection while it waits."""
    QueueFactory(name="results")
    _, key = create_key("live-admin", "admin")
    url = live_stack.start_api(workers=1, extra_env={"TASKFORGE_DB_POOL_SIZE": "4", "TASKFORGE_THREADS": "4"})
    worker_pid = _worker_pid(live_stack.processes[-1].pid)
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30, limits=limits) as client:
        created = client.post("/queues/results/tasks", json={"payload": {}}).json()
        (task,) = client.post("/workers/claim", json={"worker_id": "w", "queue": "results"}).json()["tasks"]
        with ThreadPoolExecutor(max_workers=60) as pool:
            paths = [f"/tasks/{created['id']}", f"/queues/results/tasks/{created['id']}"]
            ways = [client.get, client.get, client.head]
            reads = [pool.submit(ways[n % 3], paths[n % 2] + "?wait_seconds=20") for n in range(60)]
            time.sleep(2.0)
            waiting_reads = sum(not r.done() for r in reads)
            threads = _threads(worker_pid)
            # More waiting reads than database connections and threads, yet these are served at once.
            other = client.post("/queues/results/tasks", json={"payload": {"n": 2}})
            listed = client.get("/queues/results/tasks")
            acked = client.post(
                "/workers/ack", json={"worker_id": "w", "task_id": task["id"], "lease_token": task["lease_token"]}
            )
            results = [r.result() for r in reads]
    assert waiting_reads == 60
    assert threads < 40, threads
    assert other.status_code == 201 and listed.status_code == 200 and acked.status_code == 200
    assert all(r.status_code == 200 for r in results)
    assert all(r.json()["status"] == "done" for r in results if r.request.method == "GET")
    assert max(r.elapsed.total_seconds() for r in results) < 15  # woken by the ack, not the 20 s wait


@pytest.mark.slow
def test_reads_left_to_django_wait_on_the_event_loop_too(live_stack):
    """The lean edge serves GET; HEAD goes through Django's edge (LongPoll attempts): it waits and is woken too."""
    QueueFactory(name="results")
    _, key = create_key("live-head", "admin")
    url = live_stack.start_api(workers=1)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        created = client.post("/queues/results/tasks", json={"payload": {}}).json()
        (task,) = client.post("/workers/claim", json={"worker_id": "w", "queue": "results"}).json()["tasks"]
        lease = {"worker_id": "w", "task_id": task["id"], "lease_token": task["lease_token"]}
        timer = threading.Timer(0.7, lambda: client.post("/workers/ack", json=lease))
        timer.start()
        started = time.monotonic()
        head = client.head(f"/queues/results/tasks/{created['id']}?wait_seconds=20")
        timer.join()
        seconds = time.monotonic() - started
        assert head.status_code == 200 and "x-taskforge-must-wait" not in head.headers
        assert 0.5 < seconds < doorbell.CONNECTED_RECHECK_SECONDS  # woken by the ack's bell
        bad = client.head(f"/tasks/{created['id']}?wait_seconds=31")
        assert bad.status_code == 400
        cancelled = client.delete(f"/queues/results/tasks/{created['id']}")  # Django's edge, as attempts
        assert cancelled.status_code == 409 and cancelled.json()["error"]["code"] == "conflict"
        batch = client.post("/queues/results/tasks/batch", json={"tasks": [{"payload": {}}]})
        assert batch.status_code == 201  # not taken for a task id
