"""The client's single enqueue and its batching producer against an in-memory transport.

Flush timing (size, delay, close), how a batch's answer is shared out among
its callers, and which errors reach which caller. Against a live API, with
several producing threads: tests/integration/workers/test_client.py.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from taskforge_client import NotFound, PayloadTooLarge, TaskForgeClient, ValidationError

Answer = Callable[[httpx.Request], httpx.Response]


class Server:
    """Records every request; answers a batch with one task per item (ids ``t-<n>``), or ``answer``."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.answers: list[Answer] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.requests.append(request)
            answer = self.answers.pop(0) if self.answers else created
        return answer(request)

    def bodies(self) -> list[dict]:
        return [json.loads(request.content) for request in self.requests]


def created(request: httpx.Request) -> httpx.Response:
    items = json.loads(request.content)["tasks"]
    return httpx.Response(201, json={"tasks": [{"id": f"t-{item['payload']['n']}", **item} for item in items]})


def error(status: int, code: str, **extra: object) -> Answer:
    return lambda request: httpx.Response(status, json={"error": {"code": code, "message": "no", **extra}})


@pytest.fixture
def server() -> Server:
    return Server()


@pytest.fixture
def client(server: Server) -> Iterator[TaskForgeClient]:
    with TaskForgeClient(
        "http://tf.test", "tf_key", retries=2, backoff_seconds=0, transport=httpx.MockTransport(server)
    ) as made:
        yield made


def test_a_single_enqueue_is_one_post_with_the_body_and_the_answer_decoded(client, server):
    server.answers.append(lambda request: httpx.Response(201, json={"id": "t-1", "status": "pending"}))
    payload = {"to": "a@example.com", "nested": {"n": [1, 2]}}

    assert client.enqueue("mail", payload, priority=3) == {"id": "t-1", "status": "pending"}

    (request,) = server.requests
    assert (request.method, str(request.url)) == ("POST", "http://tf.test/queues/mail/tasks")
    assert request.headers["Content-Type"] == "application/json"
    assert json.loads(request.content) == {"payload": payload, "priority": 3}
    assert payload == {"to": "a@example.com", "nested": {"n": [1, 2]}}  # the caller's dict is left alone


def test_repeated_calls_reuse_the_parsed_url_and_a_base_path_is_kept(server):
    with TaskForgeClient("http://tf.test/api/", "k", transport=httpx.MockTransport(server)) as client:
        server.answers += [lambda request: httpx.Response(201, json={})] * 2
        client.enqueue("mail", {})
        client.enqueue("mail", {})
    assert [str(request.url) for request in server.requests] == ["http://tf.test/api/queues/mail/tasks"] * 2


def test_a_full_batch_is_sent_at_once_and_each_caller_gets_its_own_task(client, server):
    with client.batch("mail", max_size=3, max_delay=60) as producer:
        handles = [producer.enqueue({"n": n}, priority=n + 1) for n in range(3)]
        assert [handle.result(timeout=5)["id"] for handle in handles] == ["t-0", "t-1", "t-2"]
    assert handles[1].task_id == "t-1"
    ((body,),) = [server.bodies()]
    assert [item["priority"] for item in body["tasks"]] == [1, 2, 3]
    assert str(server.requests[0].url) == "http://tf.test/queues/mail/tasks/batch"


def test_a_partial_batch_waits_for_max_delay(client, server):
    with client.batch("mail", max_size=100, max_delay=0.2) as producer:
        started = time.monotonic()
        handle = producer.enqueue({"n": 7})
        time.sleep(0.05)
        assert not handle.done() and not server.requests
        assert handle.task_id == "t-7"
        assert time.monotonic() - started >= 0.2


def test_close_sends_everything_pending_in_batches_of_max_size(client, server):
    producer = client.batch("mail", max_size=4, max_delay=60)
    handles = [producer.enqueue({"n": n}) for n in range(10)]
    producer.close()
    assert all(handle.done() for handle in handles)
    assert [len(body["tasks"]) for body in server.bodies()] == [4, 4, 2]
    with pytest.raises(RuntimeError, match="closed"):
        producer.enqueue({"n": 11})


def test_flush_sends_without_waiting_for_max_delay(client, server):
    with client.batch("mail", max_size=100, max_delay=60) as producer:
        handle = producer.enqueue({"n": 1})
        producer.flush(timeout=5)
        assert handle.done() and handle.task_id == "t-1"


def test_every_item_gets_an_idempotency_key_so_a_retried_batch_repeats_the_same_keys(client, server):
    server.answers.append(error(503, "unavailable"))
    with client.batch("mail", max_size=2, max_delay=60) as producer:
        mine = producer.enqueue({"n": 1}, idempotency_key="order-1")
        generated = producer.enqueue({"n": 2})
        assert mine.task_id == "t-1" and generated.task_id == "t-2"
    first, second = server.bodies()
    assert first == second  # the retry is the same request
    keys = [item["idempotency_key"] for item in first["tasks"]]
    assert keys[0] == "order-1" and keys[1].startswith("batch-")


def test_items_a_400_names_fail_alone_and_the_rest_are_sent_again(client, server):
    server.answers.append(error(400, "validation_error", fields={"1.priority": ["too high"]}))
    with client.batch("mail", max_size=3, max_delay=60) as producer:
        handles = [producer.enqueue({"n": n}) for n in range(3)]
        with pytest.raises(ValidationError) as refused:
            handles[1].result(timeout=5)
        assert refused.value.fields == {"priority": ["too high"]}
        assert [handles[0].task_id, handles[2].task_id] == ["t-0", "t-2"]
    assert [[item["payload"]["n"] for item in body["tasks"]] for body in server.bodies()] == [[0, 1, 2], [0, 2]]


def test_a_payload_that_is_not_json_fails_alone(client, server):
    with client.batch("mail", max_size=3, max_delay=60) as producer:
        good = producer.enqueue({"n": 1})
        bad = producer.enqueue({"n": 2, "x": math.nan})
        odd = producer.enqueue({"n": 3, "x": object()})
        assert good.task_id == "t-1"
        assert isinstance(bad.exception(timeout=5), ValueError)
        assert isinstance(odd.exception(timeout=5), TypeError)
    assert [len(body["tasks"]) for body in server.bodies()] == [1]


def test_a_too_large_batch_is_split_until_only_the_too_large_task_fails(client, server):
    def capped(request: httpx.Request) -> httpx.Response:
        if b'"big"' in request.content:
            return error(413, "payload_too_large")(request)
        return created(request)

    server.answers += [capped] * 10
    with client.batch("mail", max_size=4, max_delay=60) as producer:
        handles = [producer.enqueue({"n": n, **({"big": 1} if n == 2 else {})}) for n in range(4)]
        with pytest.raises(PayloadTooLarge):
            handles[2].result(timeout=5)
        assert [handles[n].task_id for n in (0, 1, 3)] == ["t-0", "t-1", "t-3"]


def test_an_error_about_the_whole_request_reaches_every_caller_of_that_batch(client, server):
    server.answers.append(error(404, "not_found"))
    with client.batch("nope", max_size=2, max_delay=60) as producer:
        handles = [producer.enqueue({"n": n}) for n in range(2)]
        for handle in handles:
            assert isinstance(handle.exception(timeout=5), NotFound)
        later = producer.enqueue({"n": 5})  # the producer goes on
        producer.flush(timeout=5)
        assert later.task_id == "t-5"


def test_many_threads_share_one_producer_and_each_gets_its_own_id(client, server):
    results: dict[int, str] = {}

    def produce(start: int) -> None:
        for n in range(start, start + 50):
            results[n] = producer.enqueue({"n": n}).task_id

    with client.batch("mail", max_size=25, max_delay=0.005) as producer:
        threads = [threading.Thread(target=produce, args=(start,)) for start in range(0, 200, 50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert results == {n: f"t-{n}" for n in range(200)}
    assert all(len(body["tasks"]) <= 25 for body in server.bodies())


def test_bad_settings_are_refused(client):
    with pytest.raises(ValueError, match="max_size"):
        client.batch("mail", max_size=1001)
    with pytest.raises(ValueError, match="max_delay"):
        client.batch("mail", max_delay=-1)
