"""Payload search: ``GET /queues/{name}/tasks?payload_contains=<JSON object>`` (jsonb ``@>``) and its bad input."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from django.db import connection

from tests.factories import QueueFactory, TaskFactory
from tests.integration.api.support import assert_error

pytestmark = pytest.mark.django_db

TASKS = "/queues/email_jobs/tasks"


def _search(producer, contains, **params):  # type: ignore[no-untyped-def]
    query = "&".join([f"payload_contains={quote(contains)}", *(f"{k}={v}" for k, v in params.items())])
    return producer.get(f"{TASKS}?{query}")


def _ids(response) -> list[str]:  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.content
    return [task["id"] for task in response.json()["results"]]


def test_finds_the_tasks_whose_payload_contains_the_object(producer, queue):
    mine = TaskFactory(queue=queue, payload={"user_id": "abc123", "action": "welcome"})
    nested = TaskFactory(queue=queue, payload={"user": {"id": 42, "plan": "pro"}, "tags": ["a", "b"]})
    TaskFactory(queue=queue, payload={"user_id": "abc1234"})
    TaskFactory(queue=queue, payload={"user_id": 123})
    TaskFactory(queue=QueueFactory(name="elsewhere"), payload={"user_id": "abc123"})  # another queue's
    assert _ids(_search(producer, '{"user_id": "abc123"}')) == [str(mine.id)]
    assert _ids(_search(producer, '{"user_id": "abc123", "action": "welcome"}')) == [str(mine.id)]
    assert _ids(_search(producer, '{"user": {"id": 42}}')) == [str(nested.id)]
    assert _ids(_search(producer, '{"tags": ["b"]}')) == [str(nested.id)]  # array containment
    assert _ids(_search(producer, '{"user_id": "abc"}')) == []  # containment, not a substring
    assert _ids(_search(producer, '{"user_id": "abc123", "action": "other"}')) == []


def test_combines_with_the_other_filters_and_pages(producer, queue):
    hits = [TaskFactory(queue=queue, payload={"batch": 7, "n": n}) for n in range(5)]
    TaskFactory(queue=queue, payload={"batch": 8})
    first = _search(producer, '{"batch": 7}', limit=3).json()
    assert len(first["results"]) == 3 and first["next"]
    rest = _ids(_search(producer, '{"batch": 7}', cursor=first["next"]))
    assert sorted([t["id"] for t in first["results"]] + rest) == sorted(str(t.id) for t in hits)
    assert _ids(_search(producer, '{"batch": 7}', status="done")) == []


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[1, 2]",
        '"user"',
        "42",
        "{}",
        '{"a": "\\u0000"}',
        '{"a": NaN}',
        '{"a": "\\ud800"}',
        '{"a": "' + "x" * 5000 + '"}',
    ],
    ids=["not-json", "array", "string", "number", "empty", "nul", "nan", "lone-surrogate", "too-long"],
)
def test_a_bad_containment_is_a_400_naming_the_parameter(producer, queue, raw):
    assert_error(_search(producer, raw), 400, "validation_error", fields=["payload_contains"])


def test_unknown_queue_is_404_and_the_role_is_producer(client, producer, worker, queue):
    assert_error(producer.get(f"/queues/nope/tasks?payload_contains={quote(json.dumps({'a': 1}))}"), 404)
    assert_error(worker.get(f"{TASKS}?payload_contains={quote(json.dumps({'a': 1}))}"), 403)
    assert_error(client.get(f"{TASKS}?payload_contains={quote(json.dumps({'a': 1}))}"), 401)


@pytest.mark.django_db(transaction=True)
def test_the_search_is_served_by_the_payload_index(producer, queue):
    """A selective search reads the GIN index, not every task of the queue (plan read with EXPLAIN)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO tf_task (id, queue_id, payload, status, priority, scheduled_at, created_at, updated_at,
                                 status_changed_at, attempts, max_retries)
            SELECT gen_random_uuid(), %s, jsonb_build_object('user_id', 'u' || g, 'n', g), 'done', 5,
                   now(), now(), now(), now(), 1, 3
            FROM generate_series(1, 20000) g
            """,
            [queue.id],
        )
        cursor.execute("ANALYZE tf_task")
        cursor.execute(
            "EXPLAIN (COSTS OFF) SELECT id FROM tf_task WHERE queue_id = %s AND payload @> %s::jsonb "
            "ORDER BY created_at DESC, id DESC LIMIT 50",
            [queue.id, json.dumps({"user_id": "u777"})],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "tf_task_payload" in plan, plan
    assert _ids(_search(producer, '{"user_id": "u777"}')) != []
