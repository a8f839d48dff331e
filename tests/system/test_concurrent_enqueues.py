"""Concurrent single enqueues over HTTP, answered one by one, whatever statement they shared.

A real server (gunicorn, two uvicorn workers) takes many producers at once,
each posting one task per request with its own request id: concurrent
enqueues into one queue share their insert and commit there
(``queues.lifecycle.grouped``). Every request must still get its own task
(its own payload, a fresh id, 201), every task must be in Postgres, and the
server's log must carry one transition line per task, under the request id
of the request that made it.
"""

from __future__ import annotations

import json
import threading
import uuid

import httpx
import pytest

from queues.apikeys import create_key
from queues.models import Task
from tests.factories import QueueFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PRODUCERS = 12
EACH = 25


def test_concurrent_producers_each_get_their_own_durable_task_and_log_line(live_stack) -> None:
    queue = QueueFactory(name="crowd")
    _, key = create_key("crowd-producer", "producer")
    url = live_stack.start_api(workers=2)
    answers: dict[str, tuple[int, dict]] = {}  # request id -> (status, body)
    errors: list[BaseException] = []
    start = threading.Barrier(PRODUCERS)

    def produce(producer: int) -> None:
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
                start.wait()
                for n in range(EACH):
                    request_id = f"p{producer}-{n}-{uuid.uuid4().hex[:6]}"
                    response = http.post(
                        "/queues/crowd/tasks",
                        json={"payload": {"producer": producer, "n": n}},
                        headers={"X-Request-ID": request_id},
                    )
                    answers[request_id] = (response.status_code, response.json())
        except BaseException as exc:  # reported in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert len(answers) == PRODUCERS * EACH

    for request_id, (status, body) in answers.items():
        assert status == 201, (request_id, body)
        producer, n = request_id.split("-")[:2]
        assert body["payload"] == {"producer": int(producer[1:]), "n": int(n)}
        assert body["status"] == "pending"
    ids = {body["id"] for _, body in answers.values()}
    assert len(ids) == PRODUCERS * EACH
    stored = {str(task.id): task.payload for task in Task.objects.filter(queue=queue)}
    assert stored == {body["id"]: body["payload"] for _, body in answers.values()}

    lines = [json.loads(raw) for log in live_stack.logs for raw in log.read_text().splitlines() if raw.startswith("{")]
    transitions = {line["task_id"]: line["request_id"] for line in lines if line.get("event") == "task.transition"}
    assert transitions == {body["id"]: request_id for request_id, (_, body) in answers.items()}
