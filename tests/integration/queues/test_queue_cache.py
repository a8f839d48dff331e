"""The per-process queue cache: a query saved per request, every change still honoured at once.

"Another process" is simulated the way one looks from here: the row changes in
Postgres without this process's signals, and the generation counter in Redis
is bumped (or, for the worst case, not bumped at all).
"""

from __future__ import annotations

import httpx
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from queues.models import Queue, Task
from taskforge.infra import change_watch, rowcache
from taskforge.infra.redis import redis_client

pytestmark = pytest.mark.django_db


def _enqueue(producer, name: str = "email_jobs") -> int:
    return producer.post(f"/queues/{name}/tasks", {"payload": {}}, format="json").status_code


def _queue_reads(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if 'FROM "tf_queue"' in q["sql"]]


def _claim(worker) -> list[dict]:
    response = worker.post("/workers/claim", {"worker_id": "w1", "queue": "email_jobs", "max_tasks": 5}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["tasks"]


def test_a_queue_is_read_once_per_process(producer, queue):
    # Copies made while the watch was not listening (this process's first requests, or an earlier
    # test's Redis outage still healing) are read once more when it starts: wait for it first.
    watch = change_watch.current()
    assert watch is not None and watch.wait_listening(5)
    assert _enqueue(producer) == 201
    with CaptureQueriesContext(connection) as queries:
        assert _enqueue(producer) == 201
    assert _queue_reads(queries) == []
    assert Task.objects.filter(queue=queue).count() == 2


def test_a_pause_by_another_process_stops_claims_at_once(producer, worker, queue):
    assert _enqueue(producer) == 201
    assert _claim(worker) != []  # the queue is now cached unpaused
    assert _enqueue(producer) == 201
    Queue.objects.filter(pk=queue.pk).update(paused=True)
    change_watch.announce(redis_client(), rowcache.GENERATION_KEY)
    assert _claim(worker) == []


def test_new_settings_from_another_process_apply_to_the_next_enqueue(producer, queue):
    assert _enqueue(producer) == 201
    Queue.objects.filter(pk=queue.pk).update(max_retries=9)
    change_watch.announce(redis_client(), rowcache.GENERATION_KEY)
    response = producer.post("/queues/email_jobs/tasks", {"payload": {}}, format="json")
    assert response.status_code == 201
    assert response.json()["max_retries"] == 9


@pytest.mark.django_db(transaction=True)  # the foreign key is checked at commit
def test_enqueue_into_a_queue_deleted_elsewhere_is_a_404_even_without_the_bump(producer, queue):
    assert _enqueue(producer) == 201
    Task.objects.filter(queue=queue).delete()
    with connection.cursor() as cursor:  # no signal, no generation bump: the copy here is stale
        cursor.execute("DELETE FROM tf_queue WHERE id = %s", [queue.pk])
    response = producer.post("/queues/email_jobs/tasks", {"payload": {}}, format="json")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert Task.objects.count() == 0


def test_a_refused_update_leaves_the_cached_queue_untouched(admin_api, queue):
    before = admin_api.get("/queues/email_jobs").json()
    response = admin_api.patch("/queues/email_jobs", {"retry_base_ms": 50_000, "retry_max_delay_ms": 10}, format="json")
    assert response.status_code == 400
    assert admin_api.get("/queues/email_jobs").json() == before


def test_changes_through_the_api_are_seen_by_the_next_request(admin_api, producer, worker, queue):
    assert _enqueue(producer) == 201
    assert admin_api.patch("/queues/email_jobs", {"paused": True}, format="json").status_code == 200
    assert _claim(worker) == []
    assert admin_api.delete("/queues/email_jobs").status_code == 409  # a pending task remains
    assert admin_api.post("/queues/email_jobs/purge").status_code == 200
    assert admin_api.delete("/queues/email_jobs").status_code == 204
    assert _enqueue(producer) == 404
    assert admin_api.post("/queues", {"name": "email_jobs"}, format="json").status_code == 201
    assert _enqueue(producer) == 201


@pytest.fixture
def generation_reads(monkeypatch) -> list[str]:
    """Every read of the cache generation from Redis made from here on."""
    reads: list[str] = []
    real_get = type(redis_client()).get

    def counting_get(self, name, *args, **kwargs):
        if name == rowcache.GENERATION_KEY:
            reads.append(name)
        return real_get(self, name, *args, **kwargs)

    monkeypatch.setattr(type(redis_client()), "get", counting_get)
    return reads


def test_without_a_watch_the_generation_is_read_once_per_request(producer, queue, monkeypatch, generation_reads):
    monkeypatch.setattr(change_watch, "current", lambda: None)  # as on a Cluster, which has no watch
    assert _enqueue(producer) == 201  # the key and the queue: both looked up
    assert len(generation_reads) == 1


def test_while_the_watch_listens_no_request_reads_the_generation(producer, queue, generation_reads):
    watch = change_watch.current()
    assert watch is not None and watch.wait_listening(5.0)
    for _ in range(3):
        assert _enqueue(producer) == 201
    assert generation_reads == []


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_changes_made_through_one_server_apply_at_once_on_another(live_stack):
    """Two API servers, each with its own copies: a change through A is honoured by B's next request."""
    from queues.apikeys import create_key
    from tests.factories import QueueFactory

    QueueFactory(name="email_jobs")
    _, admin = create_key("live-admin", "admin")
    server_a, server_b = live_stack.start_api(), live_stack.start_api()
    headers = {"Authorization": f"Bearer {admin}"}
    with httpx.Client(base_url=server_a, headers=headers) as a, httpx.Client(base_url=server_b, headers=headers) as b:
        claim = {"worker_id": "w1", "queue": "email_jobs", "max_tasks": 1}
        for _ in range(3):  # B reads the queue, unpaused
            assert b.post("/queues/email_jobs/tasks", json={"payload": {}}).status_code == 201
        assert len(b.post("/workers/claim", json=claim).json()["tasks"]) == 1

        assert a.patch("/queues/email_jobs", json={"paused": True}).status_code == 200
        assert b.post("/workers/claim", json=claim).json()["tasks"] == []
        assert a.patch("/queues/email_jobs", json={"paused": False, "max_retries": 7}).status_code == 200
        assert len(b.post("/workers/claim", json=claim).json()["tasks"]) == 1
        assert b.post("/queues/email_jobs/tasks", json={"payload": {}}).json()["max_retries"] == 7

        assert a.post("/queues", json={"name": "short_lived"}).status_code == 201
        assert b.post("/queues/short_lived/tasks", json={"payload": {}}).status_code == 201
        assert a.post("/queues/short_lived/purge").status_code == 200
        assert a.delete("/queues/short_lived").status_code == 204
        assert b.post("/queues/short_lived/tasks", json={"payload": {}}).status_code == 404
        assert a.post("/queues", json={"name": "short_lived"}).status_code == 201
        assert b.post("/queues/short_lived/tasks", json={"payload": {}}).status_code == 201
