"""A single enqueue served on the event loop answers first, then rings Redis and writes its line.

Through the ASGI application gunicorn serves (``taskforge.asgi``), on real
Postgres and Redis: at the moment the answer's body is sent, the task is
committed but has no lane entry yet; once the request's call returns, the
lane holds it and its transition line carries the request's id, ahead of the
access line (``taskforge.infra.after_answer``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from django import db

from queues.apikeys import create_key
from queues.dispatch import lanes
from queues.models import Task
from taskforge.asgi import application
from taskforge.infra import change_watch
from taskforge.infra.redis import redis_client
from tests.factories import QueueFactory
from tests.integration.queues.loop import run

pytestmark = pytest.mark.django_db(transaction=True)


def _stored(task_id: str) -> bool:
    try:
        return Task.objects.filter(id=task_id).exists()
    finally:
        db.connection.close()  # this thread's own


def _lane(queue_name: str) -> set[str]:
    return {member.decode() for member in redis_client().zrange(lanes.ready_key(queue_name), 0, -1)}


async def _enqueue(key: str, queue_name: str, request_id: str) -> dict[str, Any]:
    """One enqueue through the application: its status, its body and the lane as it was when the body was sent."""
    body = orjson.dumps({"payload": {"n": 1}})
    seen: dict[str, Any] = {}
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"/queues/{queue_name}/tasks",
        "raw_path": f"/queues/{queue_name}/tasks".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Bearer {key}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", request_id.encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never leaves
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            seen["status"] = message["status"]
        elif message["type"] == "http.response.body":
            seen["task"] = orjson.loads(message["body"])
            seen["lane when answered"] = _lane(queue_name)
            seen["stored when answered"] = await asyncio.to_thread(_stored, seen["task"]["id"])

    await application(scope, receive, send)
    return seen


def test_the_answer_goes_out_before_the_lane_entry_and_the_line_after_it(stdout_log):
    watch = change_watch.current()  # copies are trusted only while the watch listens (it starts at first use)
    assert watch is not None and watch.wait_listening(10)
    queue = QueueFactory(name="answer-first")
    _, key = create_key("answer-first", "producer")

    async def scenario() -> list[dict[str, Any]]:
        # The first call reads the key and queue on the thread pool (which rings before answering);
        # the next ones, with both held, run on the loop. A change elsewhere on this Redis can send
        # one more to the thread pool: a few calls make sure of one served on the loop.
        answers = []
        for n in range(6):
            answers.append(await _enqueue(key, queue.name, f"req-{n}"))
        return answers

    answers = run(scenario)
    assert all(answer["status"] == 201 and answer["stored when answered"] for answer in answers)
    on_the_loop = [answer for answer in answers if answer["task"]["id"] not in answer["lane when answered"]]
    assert on_the_loop, "no enqueue was served on the event loop"

    assert {answer["task"]["id"] for answer in answers} <= _lane(queue.name)  # every one rang, after its answer
    lines = stdout_log()
    for n, answer in enumerate(answers):
        own = [line for line in lines if line.get("request_id") == f"req-{n}"]
        events = [line.get("event") for line in own]
        assert events[-2:] == ["task.transition", "http.request"], events  # the task's line, then the access line
        assert own[-2]["task_id"] == answer["task"]["id"]
