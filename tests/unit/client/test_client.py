"""The Python client against an in-memory transport: request shapes, error mapping, retries.

``httpx.MockTransport`` answers in process, so every request the client sends
is recorded and every answer (an error body, a proxy's page, a refused
connection) is chosen by the test. Against a live API: tests/integration/workers/test_client.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest

from taskforge_client import (
    Conflict,
    ConnectionFailed,
    Forbidden,
    LeaseLost,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ServerError,
    TaskForgeClient,
    TaskForgeError,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    ValidationError,
)
from taskforge_client import client as client_module

TASK_ID = uuid.UUID("0b4e3f8c-2d6a-4c1e-9f10-5a7b8c9d0e1f")

Answer = Callable[[httpx.Request], httpx.Response]


class Recorder:
    """A transport that records each request and answers with ``answer`` (200 ``{}`` by default)."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.answer: Answer = lambda request: httpx.Response(200, json={})

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(request)

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]

    def body(self, index: int = -1) -> dict:
        return json.loads(self.requests[index].content)

    def sent(self) -> list[str]:
        return [f"{request.method} {request.url.path}" for request in self.requests]


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The client's pauses between retries, recorded instead of slept."""
    recorded: list[float] = []
    monkeypatch.setattr(client_module.time, "sleep", recorded.append)
    return recorded


@pytest.fixture
def server(sleeps: list[float]) -> Recorder:
    return Recorder()


@pytest.fixture
def client(server: Recorder) -> Iterator[TaskForgeClient]:
    with TaskForgeClient(
        "http://tf.test/", "tf_key", retries=2, backoff_seconds=0.5, transport=httpx.MockTransport(server)
    ) as made:
        yield made


def error(status: int, code: str, message: str = "no", **extra: object) -> Answer:
    return lambda request: httpx.Response(status, json={"error": {"code": code, "message": message, **extra}})


# --- request shapes ------------------------------------------------------------------------------


def test_every_request_carries_the_key_and_asks_for_json(client, server):
    server.answer = lambda request: httpx.Response(200, json={"queued": 0})
    assert client.stats("mail") == {"queued": 0}
    request = server.last
    assert request.headers["Authorization"] == "Bearer tf_key"
    assert request.headers["Accept"] == "application/json"
    assert request.headers["User-Agent"].startswith("taskforge-python-client/")
    assert str(request.url) == "http://tf.test/queues/mail/stats"  # the trailing slash of the base URL is dropped


def test_enqueue_sends_only_the_fields_given(client, server):
    client.enqueue("mail", {"to": "a@example.com"})
    assert (server.last.method, server.last.url.path) == ("POST", "/queues/mail/tasks")
    assert server.body() == {"payload": {"to": "a@example.com"}}
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    client.enqueue("mail", {}, priority=1, scheduled_at=when, idempotency_key="k-1", max_retries=0)
    assert server.body() == {
        "payload": {},
        "priority": 1,
        "scheduled_at": "2030-01-02T03:04:05+02:00",
        "idempotency_key": "k-1",
        "max_retries": 0,
    }


def test_a_naive_scheduled_at_is_refused_before_any_request(client, server):
    with pytest.raises(ValueError, match="timezone-aware"):
        client.enqueue("mail", {}, scheduled_at=datetime(2030, 1, 1))
    assert server.requests == []
    client.enqueue("mail", {}, scheduled_at="2030-01-01T00:00:00Z")  # a string is passed as written
    assert server.body()["scheduled_at"] == "2030-01-01T00:00:00Z"


def test_a_batch_enqueue_builds_each_item_like_a_single_enqueue(client, server):
    server.answer = lambda request: httpx.Response(201, json={"tasks": [{"id": "a"}, {"id": "b"}]})
    tasks = client.enqueue_batch(
        "mail", [{"payload": {"n": 1}}, {"payload": {"n": 2}, "scheduled_at": datetime(2030, 1, 1, tzinfo=UTC)}]
    )
    assert tasks == [{"id": "a"}, {"id": "b"}]
    assert server.last.url.path == "/queues/mail/tasks/batch"
    assert server.body() == {
        "tasks": [{"payload": {"n": 1}}, {"payload": {"n": 2}, "scheduled_at": "2030-01-01T00:00:00+00:00"}]
    }


def test_claim_asks_for_a_long_poll_and_waits_longer_than_it(client, server):
    server.answer = lambda request: httpx.Response(200, json={"tasks": [{"id": str(TASK_ID)}]})
    assert client.claim("w-1", "mail", max_tasks=10, wait_seconds=20) == [{"id": str(TASK_ID)}]
    assert server.last.url.path == "/workers/claim"
    assert server.body() == {"worker_id": "w-1", "queue": "mail", "max_tasks": 10, "wait_seconds": 20}
    # The read timeout covers the wait plus a margin, not just the client's 15 s default.
    assert server.last.extensions["timeout"]["read"] == 20 + client_module.LONG_POLL_MARGIN_SECONDS
    client.claim("w-1")
    assert "queue" not in server.body()  # any unpaused queue
    assert server.last.extensions["timeout"]["read"] == client_module.DEFAULT_TIMEOUT


def test_worker_verbs_send_the_task_id_as_text_and_every_field_of_the_contract(client, server):
    client.heartbeat("w-1", TASK_ID, "lease-1")
    assert (server.last.url.path, server.body()) == (
        "/workers/heartbeat",
        {"worker_id": "w-1", "task_id": str(TASK_ID), "lease_token": "lease-1"},
    )
    client.ack("w-1", TASK_ID, "lease-1", result={"sent": True})
    assert (server.last.url.path, server.body()) == (
        "/workers/ack",
        {"worker_id": "w-1", "task_id": str(TASK_ID), "lease_token": "lease-1", "result": {"sent": True}},
    )
    client.nack("w-1", TASK_ID, "smtp down", "lease-1", retry=False, retry_after_seconds=60)
    assert (server.last.url.path, server.body()) == (
        "/workers/nack",
        {
            "worker_id": "w-1",
            "task_id": str(TASK_ID),
            "lease_token": "lease-1",
            "error": "smtp down",
            "retry": False,
            "retry_after_seconds": 60,
        },
    )


def test_batch_acks_and_nacks_return_the_per_item_results(client, server):
    results = [{"task_id": str(TASK_ID), "status": "done"}]
    server.answer = lambda request: httpx.Response(200, json={"results": results})
    assert client.ack_batch("w-1", [{"task_id": TASK_ID, "lease_token": "l", "result": None}]) == results
    assert server.last.url.path == "/workers/ack/batch"
    assert server.body() == {
        "worker_id": "w-1",
        "items": [{"task_id": str(TASK_ID), "lease_token": "l", "result": None}],
    }
    assert client.nack_batch("w-1", [{"task_id": TASK_ID, "error": "e"}]) == results
    assert server.last.url.path == "/workers/nack/batch"
    assert server.body()["items"] == [{"task_id": str(TASK_ID), "error": "e"}]


def test_reads_and_admin_calls_use_their_paths_and_methods(client, server):
    server.answer = lambda request: httpx.Response(200, json={"results": [{"id": "d"}], "next": None})
    assert client.dead_letters("mail") == [{"id": "d"}]
    client.get_task("mail", TASK_ID)
    client.cancel("mail", TASK_ID)
    client.create_queue("mail", max_retries=5, rate_limit=2.0)
    assert server.sent() == [
        "GET /queues/mail/dlq",
        f"GET /queues/mail/tasks/{TASK_ID}",
        f"DELETE /queues/mail/tasks/{TASK_ID}",
        "POST /queues",
    ]
    assert server.body() == {"name": "mail", "max_retries": 5, "rate_limit": 2.0}


def test_an_empty_success_answer_is_none(client, server):
    server.answer = lambda request: httpx.Response(204)
    assert client.cancel("mail", TASK_ID) is None


# --- error answers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "exception"),
    [
        (400, "validation_error", ValidationError),
        (401, "unauthorized", Unauthorized),
        (403, "forbidden", Forbidden),
        (404, "not_found", NotFound),
        (405, "method_not_allowed", MethodNotAllowed),
        (409, "conflict", Conflict),
        (409, "lease_lost", LeaseLost),
        (413, "payload_too_large", PayloadTooLarge),
        (415, "unsupported_media_type", UnsupportedMediaType),
        (500, "internal_error", ServerError),
    ],
)
def test_an_error_answer_becomes_the_exception_named_by_its_code(client, server, status, code, exception):
    server.answer = error(status, code, "it went wrong")
    with pytest.raises(exception) as caught:
        client.ack("w-1", TASK_ID)
    assert (caught.value.status, caught.value.code, caught.value.message) == (status, code, "it went wrong")
    assert str(caught.value) == f"{status} {code}: it went wrong"
    assert isinstance(caught.value, TaskForgeError)


def test_a_validation_error_keeps_the_fields_it_names(client, server):
    server.answer = error(400, "validation_error", "bad", fields={"0.priority": ["Must be 1-10."]})
    with pytest.raises(ValidationError) as caught:
        client.enqueue("mail", {})
    assert caught.value.fields == {"0.priority": ["Must be 1-10."]}


@pytest.mark.parametrize(
    ("status", "exception"),
    [(502, Unavailable), (504, Unavailable), (404, NotFound), (500, ServerError), (599, ServerError)],
)
def test_an_answer_without_our_error_body_is_mapped_by_its_status(client, server, status, exception):
    server.answer = lambda request: httpx.Response(status, text="<html>Bad Gateway</html>")
    with pytest.raises(exception) as caught:
        client.ack("w-1", TASK_ID)
    assert caught.value.status == status
    assert caught.value.message == "<html>Bad Gateway</html>"
    assert caught.value.code == exception.default_code


def test_an_unknown_client_error_is_a_plain_taskforge_error(client, server):
    server.answer = error(418, "teapot", "short and stout")
    with pytest.raises(TaskForgeError) as caught:
        client.ack("w-1", TASK_ID)
    assert type(caught.value) is TaskForgeError
    assert (caught.value.status, caught.value.code) == (418, "teapot")


def test_an_error_code_wins_over_the_status(client, server):
    server.answer = error(409, "lease_lost", "held by w-2")
    with pytest.raises(LeaseLost):
        client.heartbeat("w-1", TASK_ID)


# --- retries ----------------------------------------------------------------------------------------


def flaky(failures: int, then: httpx.Response, *, retry_after: str | None = None) -> Answer:
    """Answer 503 ``failures`` times, then ``then``."""
    seen = iter(range(10_000))

    def answer(request: httpx.Request) -> httpx.Response:
        if next(seen) < failures:
            headers = {"Retry-After": retry_after} if retry_after else {}
            return httpx.Response(503, headers=headers, json={"error": {"code": "unavailable", "message": "busy"}})
        return then

    return answer


def test_a_503_is_retried_with_growing_jittered_pauses_for_idempotent_calls(client, server, sleeps):
    server.answer = flaky(2, httpx.Response(200, json={"tasks": []}))
    assert client.claim("w-1", "mail") == []
    assert server.sent() == ["POST /workers/claim"] * 3
    # backoff 0.5 s * 2^attempt plus up to 0.5 s of jitter.
    assert len(sleeps) == 2
    assert 0.5 <= sleeps[0] <= 1.0
    assert 1.0 <= sleeps[1] <= 1.5


def test_retries_stop_after_the_configured_number_and_the_last_503_is_raised(client, server, sleeps):
    server.answer = flaky(10, httpx.Response(200, json={}))
    with pytest.raises(Unavailable) as caught:
        client.get_task("mail", TASK_ID)
    assert (caught.value.status, caught.value.message) == (503, "busy")
    assert len(server.requests) == 3  # 1 + retries=2
    assert len(sleeps) == 2


def test_a_retry_after_header_lengthens_the_pause_up_to_a_cap(client, server, sleeps):
    server.answer = flaky(1, httpx.Response(200, json={"tasks": []}), retry_after="7")
    client.claim("w-1")
    assert sleeps == [7.0]
    server.requests.clear()
    server.answer = flaky(1, httpx.Response(200, json={"tasks": []}), retry_after="3600")
    client.claim("w-1")
    assert sleeps[-1] == client_module.MAX_RETRY_AFTER_SECONDS


@pytest.mark.parametrize(
    ("call", "retried"),
    [
        (lambda c: c.claim("w-1", "mail"), True),
        (lambda c: c.heartbeat("w-1", TASK_ID), True),
        (lambda c: c.get_task("mail", TASK_ID), True),
        (lambda c: c.stats("mail"), True),
        (lambda c: c.enqueue("mail", {}, idempotency_key="once"), True),
        (lambda c: c.enqueue_batch("mail", [{"payload": {}, "idempotency_key": "a"}]), True),
        (lambda c: c.enqueue("mail", {}), False),
        (lambda c: c.enqueue_batch("mail", [{"payload": {}, "idempotency_key": "a"}, {"payload": {}}]), False),
        (lambda c: c.ack("w-1", TASK_ID), False),
        (lambda c: c.nack("w-1", TASK_ID, "e"), False),
        (lambda c: c.cancel("mail", TASK_ID), False),
        (lambda c: c.create_queue("mail"), False),
    ],
)
def test_only_calls_that_are_safe_to_repeat_are_retried(client, server, call, retried):
    server.answer = flaky(10, httpx.Response(200, json={}))
    with pytest.raises(Unavailable):
        call(client)
    assert len(server.requests) == (3 if retried else 1)


def refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def test_no_answer_at_all_is_connection_failed_after_the_same_retries(client, server, sleeps):
    server.answer = refuse
    with pytest.raises(ConnectionFailed) as caught:
        client.claim("w-1", "mail")
    assert caught.value.status is None
    assert caught.value.code == "connection_error"
    assert isinstance(caught.value, Unavailable)  # callers that back off on 503 back off on this too
    assert "POST http://tf.test/workers/claim" in caught.value.message
    assert len(server.requests) == 3
    server.requests.clear()
    with pytest.raises(ConnectionFailed):
        client.ack("w-1", TASK_ID)
    assert len(server.requests) == 1


def test_a_client_without_retries_sends_once(server):
    server.answer = flaky(1, httpx.Response(200, json={"tasks": []}))
    once = TaskForgeClient("http://tf.test", "k", retries=0, transport=httpx.MockTransport(server))
    with once, pytest.raises(Unavailable):
        once.claim("w-1")
    assert len(server.requests) == 1


def test_a_client_needs_a_key_and_a_positive_timeout():
    with pytest.raises(ValueError, match="API key"):
        TaskForgeClient("http://tf.test", "")
    with pytest.raises(ValueError, match="timeout"):
        TaskForgeClient("http://tf.test", "k", timeout=0)


# --- path parts and unexpected answers -----------------------------------------------------------


def test_queue_names_and_task_ids_are_quoted_into_one_path_segment(client, server):
    client.get_task("a/b?c#d", "../x")
    assert server.last.url.raw_path == b"/queues/a%2Fb%3Fc%23d/tasks/..%2Fx"
    client.stats("mail queue")
    assert server.last.url.raw_path == b"/queues/mail%20queue/stats"
    client.cancel("x/y", "1 2")
    assert (server.last.method, server.last.url.raw_path) == ("DELETE", b"/queues/x%2Fy/tasks/1%202")


def test_a_success_answer_that_is_not_json_is_a_server_error(client, server):
    server.answer = lambda request: httpx.Response(200, text="<html>proxy says hi</html>")
    with pytest.raises(ServerError) as caught:
        client.heartbeat("w", TASK_ID, "lease")
    assert caught.value.code == "invalid_answer"
    assert caught.value.status == 200
    assert "not JSON" in caught.value.message and "proxy says hi" in caught.value.message


def test_a_heartbeat_may_skip_retries_and_take_a_shorter_timeout(client, server):
    server.answer = error(503, "unavailable")
    with pytest.raises(Unavailable):
        client.heartbeat("w", TASK_ID, "lease", timeout=0.7, retry=False)
    assert len(server.requests) == 1
    assert server.last.extensions["timeout"]["read"] == 0.7
