"""The hot calls at the lean edge answer over HTTP exactly as Django's path does.

A real server (gunicorn, the uvicorn worker, ``taskforge.asgi``) serves
enqueue (single and batch), claim, heartbeat, ack and nack (single and batch) through
``taskforge.http.lean``; the
same requests sent through Django's own stack (DRF's test client) are the
reference: same status, same body, same ``Allow`` and ``WWW-Authenticate``,
for successes and for every refusal (401, 403, 404, 405, 413, 415, 400, in
the contract's order). Every request, long polls included, has its request id
(echoed when sane, made otherwise), exactly one access log line, and is
counted once on /metrics under its view, method and status.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.conf import settings
from rest_framework.test import APIClient

from queues.apikeys import create_key
from tests.factories import QueueFactory
from tests.integration.observability.scrape import family, parse

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

VIEWS = {
    "/queues/lean/tasks": "task-list",
    "/queues/lean/tasks/batch": "task-batch",
    "/workers/claim": "worker-claim",
    "/workers/heartbeat": "worker-heartbeat",
    "/workers/ack": "worker-ack",
    "/workers/ack/batch": "worker-ack-batch",
    "/workers/nack": "worker-nack",
    "/workers/nack/batch": "worker-nack-batch",
}
JSON = "application/json"
# Fields that differ between two answers of the same kind (new ids, clocks).
VOLATILE = {"id", "task_id", "created_at", "updated_at", "scheduled_at", "claimed_at", "heartbeat_at",
            "lease_token", "lease_expires_at", "finished_at"}  # fmt: skip


def _stable(body: Any) -> Any:
    if isinstance(body, dict):
        return {k: "…" if k in VOLATILE else _stable(v) for k, v in body.items()}
    if isinstance(body, list):
        return [_stable(item) for item in body]
    return body


class Both:
    """Sends each request to the live server and through Django's stack, and compares the answers."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=40)
        self.django = APIClient()
        self.sent: Counter[tuple[str, str, str]] = Counter()  # (view, method, status) over HTTP
        self.request_ids: list[str] = []

    def live(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str], *, resolved: bool = True
    ) -> httpx.Response:
        """``resolved`` False: refused by the body rules (``BodyLimitMiddleware`` on Django's path), before
        the metrics middleware that counts by view and status, so not counted there (nor by Django)."""
        response = self.http.request(method, path, content=body, headers=headers)
        view = VIEWS.get(re.sub(r"^/queues/[^/]+/", "/queues/lean/", path.rstrip("/")))
        if view is not None and response.status_code != 413:  # the body cap answers before any view
            if resolved:
                self.sent[(view, method, str(response.status_code))] += 1
            self.request_ids.append(response.headers["x-request-id"])
        return response

    def reference(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Any:
        extra = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}
        content_type = extra.pop("HTTP_CONTENT_TYPE", None)
        kwargs = {"content_type": content_type} if content_type is not None else {}
        return self.django.generic(method, path, body or b"", **kwargs, **extra)

    def same(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        key: str | None,
        expect: int,
        resolved: bool = True,
        **headers: str,
    ) -> Any:
        """Send the request both ways: same status (``expect``), body and headers; the live body."""
        raw = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        if raw and "Content-Type" not in headers:
            headers["Content-Type"] = JSON
        if key is not None:
            headers.setdefault("Authorization", f"Bearer {key}")
        live = self.live(method, path, raw, headers, resolved=resolved)
        reference = self.reference(method, path, raw, headers)
        assert live.status_code == expect, (method, path, live.status_code, live.text)
        assert reference.status_code == expect, (method, path, reference.status_code, reference.content)
        live_body = live.json()
        assert _stable(live_body) == _stable(json.loads(reference.content)), (method, path)
        for name in ("Allow", "WWW-Authenticate", "Content-Type", "X-Frame-Options", "X-Content-Type-Options"):
            assert live.headers.get(name) == reference.headers.get(name), (method, path, name)
        return live_body


@pytest.fixture
def world(live_stack):
    QueueFactory(name="lean")
    keys = {role: create_key(f"lean-{role}", role)[1] for role in ("admin", "producer", "worker")}
    url = live_stack.start_api(workers=1)
    return keys, url, live_stack


def test_every_hot_call_answers_as_django_does(world) -> None:
    keys, url, stack = world
    both = Both(url)
    producer, worker = keys["producer"], keys["worker"]

    for path, role_key in [(p, producer if p.startswith("/queues") else worker) for p in VIEWS]:
        wrong_key = worker if role_key == producer else producer
        # 415 and the body rules come first, before authentication.
        both.same("POST", path, b"x", key=None, expect=415, resolved=False, **{"Content-Type": "text/plain"})
        both.same("POST", path, {}, key=None, expect=415, resolved=False, **{"Content-Encoding": "gzip"})
        # Then 401, then 403 ...
        both.same("POST", path, {}, key=None, expect=401)
        both.same("POST", path, b"{not json", key=None, expect=401)
        both.same("POST", path, {}, key=None, expect=401, Authorization="Basic abc")
        both.same("POST", path, {}, key="tf_" + "0" * 40, expect=401)
        both.same("POST", path, {}, key=wrong_key, expect=403)
        # ... then 405 for another method (answered by Django, after the same 401).
        both.same("GET", path, None, key=None, expect=401)
        both.same("PUT", path, {}, key=role_key, expect=405)
        # Bodies the parser or the validation refuse.
        both.same("POST", path, b"{not json", key=role_key, expect=400)
        both.same("POST", path, b"[1]", key=role_key, expect=400)
        both.same("POST", path, b'{"a": "\\u0000"}', key=role_key, expect=400)
        both.same("POST", path, {"unknown": 1}, key=role_key, expect=400)
        both.same("POST", path, None, key=role_key, expect=400)  # no body: every required field missing
        both.same("POST", path + "/", {"unknown": 1}, key=role_key, expect=400)
        both.same("POST", path, {}, key=role_key, expect=415, **{"Content-Type": "application/json; charset=latin-1"})
        # The body cap, whatever the key (no request id, no log line: answered before any of that).
        huge = b'{"payload": "' + b"x" * settings.TASKFORGE_MAX_PAYLOAD_BYTES + b'"}'
        too_large = both.live("POST", path, huge, {"Content-Type": JSON, "Authorization": f"Bearer {role_key}"})
        assert too_large.status_code == 413, too_large.text
        assert too_large.json()["error"]["code"] == "payload_too_large"

    # 404s: an unknown queue, whatever the body, after authentication.
    both.same("POST", "/queues/nowhere/tasks", {"payload": {}}, key=producer, expect=404)
    both.same("POST", "/queues/nowhere/tasks", b"{not json", key=producer, expect=404)
    both.same("POST", "/queues/nowhere/tasks/batch", {"tasks": [{"payload": {}}]}, key=producer, expect=404)
    both.same("POST", "/queues/nowhere/tasks/batch", b"{not json", key=producer, expect=404)
    batch = "/queues/lean/tasks/batch"
    # A read of a task named "batch" is not what Django serves there: its earlier URL (405) answers.
    both.same("GET", batch, None, key=producer, expect=405)
    # A batch's refusals: errors keyed by item index, the list's own bounds, keys repeated within it.
    bad_items = {"tasks": [{"payload": {}}, {"payload": {}, "priority": 0}, "x", {"payload": 1, "max_retries": -1}]}
    refused = both.same("POST", batch, bad_items, key=producer, expect=400)
    assert set(refused["error"]["fields"]) == {"1.priority", "2", "3.payload", "3.max_retries"}, refused
    both.same("POST", batch, {"tasks": []}, key=producer, expect=400)
    both.same("POST", batch, {"tasks": [{"payload": {}}] * 1001}, key=producer, expect=400)
    both.same("POST", batch, {"tasks": {"payload": {}}}, key=producer, expect=400)
    twice = {"tasks": [{"payload": {}, "idempotency_key": "same"}, {"payload": {}, "idempotency_key": "same"}]}
    both.same("POST", batch, twice, key=producer, expect=400)
    both.same("POST", "/workers/claim", {"worker_id": "w", "queue": "nowhere"}, key=worker, expect=404)
    lease = {"worker_id": "w", "task_id": str(uuid.uuid4()), "lease_token": "x"}
    both.same("POST", "/workers/heartbeat", lease, key=worker, expect=404)
    both.same("POST", "/workers/ack", lease, key=worker, expect=404)
    both.same("POST", "/workers/nack", {**lease, "error": "e"}, key=worker, expect=404)
    # The batch forms: an unknown task is its item's error beside the others; the list's own bounds.
    for path, item in (("/workers/ack/batch", lease), ("/workers/nack/batch", {**lease, "error": "e"})):
        bare = {k: v for k, v in item.items() if k != "worker_id"}
        answered = both.same("POST", path, {"worker_id": "w", "items": [bare, bare]}, key=worker, expect=200)
        assert [r["error"]["code"] for r in answered["results"]] == ["not_found", "not_found"], answered
        refused = both.same("POST", path, {"worker_id": "w", "items": [bare, {"task_id": "x"}]}, key=worker, expect=400)
        assert any(name.startswith("items.1") for name in refused["error"]["fields"]), refused
        both.same("POST", path, {"worker_id": "w", "items": []}, key=worker, expect=400)
        both.same("POST", path, {"worker_id": "w", "items": [bare] * 101}, key=worker, expect=400)
        both.same("POST", path, {"worker_id": "w", "items": bare}, key=worker, expect=400)

    # Successes: the live server's own (each changes state, so no reference run).
    def live(path: str, body: dict[str, Any], key: str, **headers: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}", **headers}
        return both.live("POST", path, json.dumps(body).encode(), {"Content-Type": JSON, **headers})

    created = live("/queues/lean/tasks", {"payload": {"n": 1}, "idempotency_key": "k1"}, producer)
    assert created.status_code == 201 and created.json()["status"] == "pending", created.text
    again = live("/queues/lean/tasks/", {"payload": {"n": 1}, "idempotency_key": "k1"}, producer)
    assert again.status_code == 200 and again.json()["id"] == created.json()["id"]
    claimed = live("/workers/claim", {"worker_id": "w", "queue": "lean", "max_tasks": 1}, worker)
    assert claimed.status_code == 200, claimed.text
    (task,) = claimed.json()["tasks"]
    assert task["id"] == created.json()["id"] and task["lease_token"]
    lease = {"worker_id": "w", "task_id": task["id"], "lease_token": task["lease_token"]}
    beat = live("/workers/heartbeat", lease, worker)
    assert beat.status_code == 200 and set(beat.json()) == {"task_id", "status", "lease_expires_at", "cancel_requested"}
    acked = live("/workers/ack", {**lease, "result": {"ok": True}}, worker)
    assert acked.status_code == 200 and acked.json()["status"] == "done", acked.text
    assert live("/workers/ack", lease, worker).status_code in (200, 409)
    # Again within the second (the key, the queue and this worker's "last seen" fresh in the process):
    # these run on the event loop, with the same answers, refusals included.
    live("/queues/lean/tasks", {"payload": {"n": 1}}, producer)
    (warm,) = live("/workers/claim", {"worker_id": "w", "queue": "lean", "max_tasks": 1}, worker).json()["tasks"]
    lease = {"worker_id": "w", "task_id": warm["id"], "lease_token": warm["lease_token"]}
    both.same("POST", "/workers/heartbeat", {**lease, "lease_token": "nope"}, key=worker, expect=409)
    both.same("POST", "/workers/ack", {**lease, "lease_token": "nope"}, key=worker, expect=409)
    assert live("/workers/heartbeat", lease, worker).json()["status"] == "executing"
    assert live("/workers/ack", lease, worker).json()["status"] == "done"

    # A long poll that waits, then gets the task enqueued meanwhile; one that gets nothing.
    timer = threading.Timer(0.7, lambda: live("/queues/lean/tasks", {"payload": {"n": 2}}, producer))
    timer.start()
    started = time.monotonic()
    polled = live("/workers/claim", {"worker_id": "w", "queue": "lean", "wait_seconds": 10}, worker)
    timer.join()
    assert polled.status_code == 200 and len(polled.json()["tasks"]) == 1, polled.text
    assert 0.5 < time.monotonic() - started < 8
    (task,) = polled.json()["tasks"]
    nacked = live("/workers/nack", {"worker_id": "w", "task_id": task["id"], "lease_token": task["lease_token"],
                                    "error": "boom", "retry": False}, worker)  # fmt: skip
    assert nacked.status_code == 200 and nacked.json()["status"] == "dead", nacked.text
    empty = live("/workers/claim", {"worker_id": "w", "queue": "lean", "wait_seconds": 1}, worker)
    assert empty.status_code == 200 and empty.json() == {"tasks": []}
    # Acks and nacks of several: each item's outcome, in order, a stale lease beside an acked task.
    for n in range(3):
        live("/queues/lean/tasks", {"payload": {"n": n}}, producer)
    held = live("/workers/claim", {"worker_id": "w", "queue": "lean", "max_tasks": 3}, worker).json()["tasks"]
    assert len(held) == 3, held
    items = [{"task_id": t["id"], "lease_token": t["lease_token"]} for t in held]
    acked = live(
        "/workers/ack/batch", {"worker_id": "w", "items": [items[0], {**items[1], "lease_token": "nope"}]}, worker
    )
    assert acked.status_code == 200, acked.text
    assert [r.get("status") or r["error"]["code"] for r in acked.json()["results"]] == ["done", "lease_lost"]
    nacked = live("/workers/nack/batch", {"worker_id": "w", "items": [{**i, "error": "boom", "retry": False}
                                                                        for i in items[1:]]}, worker)  # fmt: skip
    assert nacked.status_code == 200 and [r["status"] for r in nacked.json()["results"]] == ["dead", "dead"], (
        nacked.text
    )
    # A batch: created in one call, an item's idempotency key replayed, then reused with another body.
    keyed = {"tasks": [{"payload": {"n": 5}, "idempotency_key": "b1"}, {"payload": {"n": 3}, "priority": 9}]}
    made = live("/queues/lean/tasks/batch", keyed, producer)
    assert made.status_code == 201 and [t["status"] for t in made.json()["tasks"]] == ["pending", "pending"], made.text
    replayed = live("/queues/lean/tasks/batch", {"tasks": [keyed["tasks"][0]]}, producer)
    assert replayed.status_code == 201 and replayed.json()["tasks"][0]["id"] == made.json()["tasks"][0]["id"]
    clash = live("/queues/lean/tasks/batch", {"tasks": [{"payload": {"n": 4}, "idempotency_key": "b1"}]}, producer)
    assert clash.status_code == 409 and clash.json()["error"]["code"] == "conflict", clash.text

    # Request ids: a sane one is echoed, anything else replaced by a fresh one.
    mine = live("/workers/claim", {"worker_id": "w", "queue": "lean"}, worker, **{"X-Request-ID": "trace-42"})
    assert mine.headers["x-request-id"] == "trace-42"
    odd = live("/workers/claim", {"worker_id": "w", "queue": "lean"}, worker, **{"X-Request-ID": "bad id!"})
    assert odd.headers["x-request-id"] not in ("bad id!", "") and len(odd.headers["x-request-id"]) == 32

    # One access log line per request, with its id (long polls included). The line and the request's
    # metrics are written once its answer is sent, so the newest may still be on their way: wait for
    # every request's line, then count them.
    def access_lines() -> Counter[str]:
        lines = [json.loads(raw) for log in stack.logs for raw in log.read_text().splitlines() if raw.startswith("{")]
        return Counter(line["request_id"] for line in lines if line.get("event") == "http.request")

    logged = _eventually(access_lines, lambda counts: all(counts[request_id] for request_id in both.request_ids))
    assert all(logged[request_id] == 1 for request_id in both.request_ids), [
        (i, logged[i]) for i in both.request_ids if logged[i] != 1
    ]

    # Every request counted once on /metrics, by view, method and status.
    def counted_by_status() -> dict[frozenset[tuple[str, str]], float]:
        samples = parse(httpx.get(f"{url}/metrics", timeout=10).text)
        return family(samples, "django_http_responses_total_by_status_view_method_total")

    def labels(view: str, method: str, status: str) -> frozenset[tuple[str, str]]:
        return frozenset({"view": view, "method": method, "status": status}.items())

    counted = _eventually(
        counted_by_status, lambda found: all(found.get(labels(*key)) == n for key, n in both.sent.items())
    )
    for (view, method, status), sent in both.sent.items():
        found = counted.get(labels(view, method, status))
        assert found == sent, (view, method, status, found, sent)
    by_view = family(
        parse(httpx.get(f"{url}/metrics", timeout=10).text), "django_http_requests_total_by_view_transport_method_total"
    )
    for view in VIEWS.values():
        view_labels = frozenset({"view": view, "transport": "http", "method": "POST"}.items())
        sent = sum(n for (v, m, _), n in both.sent.items() if v == view and m == "POST")
        assert by_view.get(view_labels) == sent, (view, by_view.get(view_labels), sent)


def test_a_host_django_refuses_stays_refused(world) -> None:
    """The edge remembers each Host header's check: a refused host is Django's 400 every time, others served."""
    keys, url, _ = world
    both = Both(url)
    for _ in range(3):
        both.same("POST", "/queues/lean/tasks", {"payload": {}}, key=keys["producer"], expect=400, Host="evil.example")
        both.same("POST", "/queues/lean/tasks", {"payload": {}}, key=keys["producer"], expect=201)


def test_task_reads_answer_as_django_does(world) -> None:
    """``GET /queues/{name}/tasks/{id}`` and ``GET /tasks/{id}``, waiting or not, answer as Django's path does."""
    keys, url, _ = world
    both = Both(url)
    producer, worker = keys["producer"], keys["worker"]
    created = both.live(
        "POST", "/queues/lean/tasks", json.dumps({"payload": {"n": 1}, "kind": "k.read"}).encode(),
        {"Content-Type": JSON, "Authorization": f"Bearer {producer}"},
    ).json()  # fmt: skip
    unknown = str(uuid.uuid4())
    for path in (f"/queues/lean/tasks/{created['id']}", f"/tasks/{created['id']}"):
        both.same("GET", path, key=None, expect=401)
        both.same("GET", path + "?wait_seconds=5", key=worker, expect=403)
        both.same("PUT", path, {}, key=producer, expect=405)
        for query in ("?wait_seconds=31", "?wait_seconds=x", "?wait_seconds=-1", "?wait_seconds=", "?wait=1"):
            both.same("GET", path + query, key=producer, expect=400)
        body = both.same("GET", path, key=producer, expect=200)
        assert body["kind"] == "k.read" and [h["to_status"] for h in body["history"]] == ["pending"]
        both.same("GET", path + "/?wait_seconds=0", key=producer, expect=200)
    both.same("GET", f"/tasks/{unknown}?wait_seconds=3", key=producer, expect=404)
    both.same("GET", "/tasks/not-a-uuid", key=producer, expect=404)
    both.same("GET", f"/queues/nowhere/tasks/{created['id']}", key=producer, expect=404)

    # A read that waits, woken by the ack; one that waits to its end.
    def call(method: str, path: str, key: str, body: Any = None) -> httpx.Response:
        raw = None if body is None else json.dumps(body).encode()
        return both.http.request(method, path, content=raw, headers={"Authorization": f"Bearer {key}",
                                                                      "Content-Type": JSON})  # fmt: skip

    (task,) = call("POST", "/workers/claim", worker, {"worker_id": "w", "queue": "lean"}).json()["tasks"]
    lease = {"worker_id": "w", "task_id": task["id"], "lease_token": task["lease_token"], "result": {"ok": 1}}
    timer = threading.Timer(0.7, lambda: call("POST", "/workers/ack", worker, lease))
    timer.start()
    started = time.monotonic()
    read = call("GET", f"/tasks/{task['id']}?wait_seconds=20", producer)
    timer.join()
    assert read.status_code == 200 and (read.json()["status"], read.json()["result"]) == ("done", {"ok": 1})
    assert 0.5 < time.monotonic() - started < 5
    # Cancel of a running task and heartbeat progress, over HTTP and through Django's stack alike.
    call("POST", "/queues/lean/tasks", producer, {"payload": {}})
    (running,) = call("POST", "/workers/claim", worker, {"worker_id": "w", "queue": "lean"}).json()["tasks"]
    lease = {"worker_id": "w", "task_id": running["id"], "lease_token": running["lease_token"]}
    both.same("POST", "/workers/heartbeat", {**lease, "progress": [1]}, key=worker, expect=400)
    both.same("POST", "/workers/heartbeat", {**lease, "progress": {"p": "x" * 5000}}, key=worker, expect=400)
    beat = both.same("POST", "/workers/heartbeat", {**lease, "progress": {"n": 1}}, key=worker, expect=200)
    assert beat["cancel_requested"] is False
    asked = both.same("DELETE", f"/queues/lean/tasks/{running['id']}", key=producer, expect=202)
    assert asked["cancel_requested"] is True and asked["progress"] == {"n": 1}
    assert call("POST", "/workers/heartbeat", worker, lease).json()["cancel_requested"] is True
    nacked = call("POST", "/workers/nack", worker, {**lease, "error": "stopped"}).json()
    assert nacked["status"] == "cancelled"

    other = call("POST", "/queues/lean/tasks", producer, {"payload": {}}).json()
    started = time.monotonic()
    still = call("GET", f"/queues/lean/tasks/{other['id']}?wait_seconds=1", producer)
    assert still.status_code == 200 and still.json()["status"] == "pending"
    assert time.monotonic() - started >= 0.9


def _eventually[T](read: Callable[[], T], done: Callable[[T], bool], timeout: float = 10.0) -> T:
    """``read()`` again until ``done`` says its value is complete (or the time is up): the last value read."""
    deadline = time.monotonic() + timeout
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.05)
        value = read()
    return value
