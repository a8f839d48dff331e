"""The pusher delivering to a real HTTP receiver on loopback: headers, signatures and outcomes.

The pusher runs in the test process (``Pusher.run_once`` driven in a loop, as ``run_pusher``
drives it), its requests go over real sockets to ``tests.push_receiver``; Postgres and Redis
are the real ones. Rows are committed (``transaction=True``): retries become due by Postgres'
own clock.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings

from queues import lifecycle
from queues.loops import pusher as pusher_loop
from queues.models import Queue, Task
from queues.push import secrets as push_secrets
from taskforge_client.push import signature_problem, verify_signature
from tests.factories import QueueFactory
from tests.push_receiver import Receiver, Reply

pytestmark = pytest.mark.django_db(transaction=True)


def push_queue(url: str, *, name: str = "hooks", **push: Any) -> Queue:
    settings = {"url": url, "timeout_seconds": 30, "max_concurrent": 10, "headers": {}, **push}
    fields = {key: push.pop(key) for key in list(push) if key in ("max_retries", "retry_base_ms", "paused")}
    settings = {key: value for key, value in settings.items() if key not in fields}
    queue = QueueFactory(name=name, push=settings, retry_base_ms=fields.pop("retry_base_ms", 50),
                         retry_max_delay_ms=1000, **fields)  # fmt: skip
    push_secrets.set_for_new_push(queue)
    queue.save()
    return queue


def enqueue(queue: Queue, payload: dict[str, Any] | None = None, **fields: Any) -> uuid.UUID:
    task = lifecycle.NewTask(payload=payload or {"n": 1}, priority=fields.get("priority", 5), scheduled_at=None,
                             idempotency_key=None, max_retries=fields.get("max_retries"), fingerprint=None,
                             kind=fields.get("kind"), timeout_seconds=None)  # fmt: skip
    ((row, _),) = lifecycle.enqueue(queue, [task])
    return row["id"]


@pytest.fixture
def pusher() -> Iterator[pusher_loop.Pusher]:
    running = pusher_loop.Pusher(worker_id="pusher-test", allow_private=True)
    try:
        yield running
    finally:
        running.close(grace=2)


def drive(pusher: pusher_loop.Pusher, until: Callable[[], bool], timeout: float = 20.0) -> None:
    """Run the pusher (and promote due retries, as the scheduler would) until ``until()``."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "not done in time"
        lifecycle.promote_due()
        if not pusher.run_once().handled:
            pusher.wait(0.05)


def status(task_id: uuid.UUID) -> str:
    return Task.objects.get(id=task_id).status


def test_a_delivery_carries_the_contract_headers_and_a_valid_signature(pusher, receiver) -> None:  # type: ignore[no-untyped-def]
    receiver.respond = lambda _: Reply(200, b'{"sent": true, "id": 7}', {"Content-Type": "application/json"})
    queue = push_queue(receiver.url, headers={"Authorization": "Bearer for-the-receiver", "X-Team": "mail"})
    task_id = enqueue(queue, {"user": "abc", "ü": "ß"}, kind="emails.send")
    drive(pusher, lambda: status(task_id) == "done")
    (got,) = receiver.received
    assert got.path == "/hook"
    assert json.loads(got.body) == {"user": "abc", "ü": "ß"}
    headers = got.headers
    assert headers["content-type"] == "application/json"
    assert headers["taskforge-task-id"] == str(task_id)
    assert headers["taskforge-queue"] == "hooks"
    assert headers["taskforge-attempt"] == "1"
    assert headers["taskforge-kind"] == "emails.send"
    assert abs(int(headers["taskforge-timestamp"]) - time.time()) < 30
    assert headers["authorization"] == "Bearer for-the-receiver" and headers["x-team"] == "mail"
    assert headers["taskforge-signature"].startswith("v1=") and "," not in headers["taskforge-signature"]
    secret = Queue.objects.get(name="hooks").push_secret
    assert verify_signature(headers, got.body, [secret])
    assert not verify_signature(headers, got.body + b" ", [secret]), "the body is signed"
    assert not verify_signature(headers, got.body, ["another secret"])
    task = Task.objects.get(id=task_id)
    assert task.result == {"sent": True, "id": 7}
    assert task.claimed_by == "pusher-test" and task.attempts == 1


def test_an_idle_pusher_is_woken_by_its_queues_doorbell(pusher, receiver, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The timed ways back to the queue (the idle pass, the empty backoff) are far off: only the bell is near.
    monkeypatch.setattr(pusher_loop, "EMPTY_QUEUE_BACKOFF_SECONDS", 60.0)
    queue = push_queue(receiver.url)
    assert pusher.run_once().started == 0  # nothing to deliver yet
    deadline = time.monotonic() + 10
    while queue.name not in pusher.bells.listening_for:
        assert time.monotonic() < deadline, "the pusher never listened for the queue's doorbell"
        time.sleep(0.01)
    pusher.run_once()  # whatever rang before it listened (the subscription's own wake-up)
    task_id = enqueue(queue)  # rings the doorbell once committed
    waited = time.monotonic()
    pusher.wait(30.0)
    assert time.monotonic() - waited < 10.0, "the wait ran to its timeout: the bell was not heard"
    drive(pusher, lambda: status(task_id) == "done")


def test_no_kind_header_without_a_kind_and_a_non_object_answer_is_no_result(pusher, receiver) -> None:  # type: ignore[no-untyped-def]
    receiver.respond = lambda _: Reply(204)
    queue = push_queue(receiver.url)
    first = enqueue(queue)
    drive(pusher, lambda: status(first) == "done")
    assert "taskforge-kind" not in receiver.received[0].headers
    assert Task.objects.get(id=first).result is None
    for body in (b"[1, 2]", b"not json", b'{"a": "\\u0000"}', b'{"big": "' + b"x" * 70_000 + b'"}'):
        receiver.respond = lambda _, body=body: Reply(200, body)  # type: ignore[misc]
        task_id = enqueue(queue)
        drive(pusher, lambda task_id=task_id: status(task_id) == "done")  # type: ignore[misc]
        assert Task.objects.get(id=task_id).result is None, body[:20]


def test_two_500s_then_a_200_is_done_on_attempt_three(pusher, receiver) -> None:  # type: ignore[no-untyped-def]
    receiver.respond = lambda got: Reply(500, b"boom " * 100) if got.attempt < 3 else Reply(200, b'{"ok": 1}')
    queue = push_queue(receiver.url)
    task_id = enqueue(queue)
    drive(pusher, lambda: status(task_id) == "done")
    attempts = receiver.of(str(task_id))
    assert [r.attempt for r in attempts] == [1, 2, 3]
    secret = Queue.objects.get(name="hooks").push_secret
    assert all(verify_signature(r.headers, r.body, secret) for r in attempts)
    task = Task.objects.get(id=task_id)
    assert (task.attempts, task.result) == (3, {"ok": 1})
    failed = [e for e in task.events.order_by("at") if e.to_status == "retry"]
    assert len(failed) == 2
    assert failed[0].detail.startswith("HTTP 500: boom boom")
    assert len(failed[0].detail.encode()) <= len("HTTP 500: ") + 200


def test_a_500_on_the_last_attempt_is_dead_in_the_dlq(pusher, receiver) -> None:  # type: ignore[no-untyped-def]
    receiver.respond = lambda _: Reply(404, b"no such hook")
    queue = push_queue(receiver.url, max_retries=1)
    task_id = enqueue(queue)
    drive(pusher, lambda: status(task_id) == "dead")
    task = Task.objects.get(id=task_id)
    assert task.attempts == 2 and task.last_error == "HTTP 404: no such hook"
    assert task.dead_letter.last_error == "HTTP 404: no such hook"


def test_429_with_retry_after_waits_that_long(pusher, receiver) -> None:  # type: ignore[no-untyped-def]
    receiver.respond = lambda got: Reply(429, b"slow down", {"Retry-After": "2"}) if got.attempt == 1 else Reply(200)
    queue = push_queue(receiver.url)
    task_id = enqueue(queue)
    drive(pusher, lambda: status(task_id) == "done")
    first, second = receiver.of(str(task_id))
    assert second.at - first.at >= 2.0
    assert Task.objects.get(id=task_id).events.filter(to_status="retry").get().detail == "HTTP 429: slow down"


def test_503_with_retry_after_waits_too_and_without_it_backs_off(pusher, receiver) -> None:  # type: ignore[no-untyped-def]
    replies = {1: Reply(503, b"", {"Retry-After": "1"}), 2: Reply(503)}
    receiver.respond = lambda got: replies.get(got.attempt, Reply(200))
    queue = push_queue(receiver.url)
    task_id = enqueue(queue)
    drive(pusher, lambda: status(task_id) == "done")
    first, second, third = receiver.of(str(task_id))
    assert second.at - first.at >= 1.0
    assert third.at - second.at < 1.0, "no Retry-After: the queue's 50 ms backoff"


def test_a_hanging_receiver_times_out_at_timeout_seconds_and_is_retried(pusher, receiver) -> None:  # type: ignore[no-untyped-def]
    receiver.respond = lambda got: Reply(200, delay=10) if got.attempt == 1 else Reply(200)
    queue = push_queue(receiver.url, timeout_seconds=1)
    task_id = enqueue(queue)
    started = time.monotonic()
    drive(pusher, lambda: status(task_id) == "done")
    assert time.monotonic() - started < 8
    first, second = receiver.of(str(task_id))
    assert 1.0 <= second.at - first.at < 5
    assert Task.objects.get(id=task_id).events.get(to_status="retry").detail == "timed out after 1 s"


def test_a_redirect_is_not_followed_and_is_a_failed_attempt(pusher, receiver) -> None:  # type: ignore[no-untyped-def]
    receiver.respond = lambda got: Reply(302, b"moved", {"Location": "http://127.0.0.1:1/elsewhere"})
    queue = push_queue(receiver.url, max_retries=0)
    task_id = enqueue(queue)
    drive(pusher, lambda: status(task_id) == "dead")
    assert len(receiver.received) == 1
    assert Task.objects.get(id=task_id).last_error == (
        "HTTP 302 (redirect to 'http://127.0.0.1:1/elsewhere', not followed): moved"
    )


def test_a_connection_error_is_a_failed_attempt(pusher) -> None:  # type: ignore[no-untyped-def]
    from tests.live import free_port

    queue = push_queue(f"http://127.0.0.1:{free_port()}/nobody", max_retries=0)
    task_id = enqueue(queue)
    drive(pusher, lambda: status(task_id) == "dead")
    assert Task.objects.get(id=task_id).last_error.startswith("connection error: ")


def test_a_paused_push_queue_delivers_nothing_until_resumed(pusher, receiver) -> None:  # type: ignore[no-untyped-def]
    queue = push_queue(receiver.url, paused=True)
    task_id = enqueue(queue)
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        pusher.run_once()
        pusher.wait(0.05)
    assert receiver.received == [] and status(task_id) == "pending"
    Queue.objects.filter(id=queue.id).update(paused=False)
    drive(pusher, lambda: status(task_id) == "done")


def test_after_a_rotation_both_secrets_sign_until_the_grace_ends(pusher, receiver) -> None:  # type: ignore[no-untyped-def]
    queue = push_queue(receiver.url)
    old = Queue.objects.get(id=queue.id).push_secret
    _, new = push_secrets.rotate("hooks")
    time.sleep(1.1)  # the pusher re-reads its queues every second
    task_id = enqueue(queue)
    drive(pusher, lambda: status(task_id) == "done")
    got = receiver.received[-1]
    signatures = got.headers["taskforge-signature"].split(",")
    assert len(signatures) == 2 and all(s.startswith("v1=") for s in signatures)
    assert verify_signature(got.headers, got.body, [new]) and verify_signature(got.headers, got.body, [old])
    with override_settings(TASKFORGE_PUSH_SECRET_GRACE_SECONDS=0):
        time.sleep(1.1)
        later = enqueue(queue)
        drive(pusher, lambda: status(later) == "done")
    last = receiver.received[-1]
    assert "," not in last.headers["taskforge-signature"]
    assert verify_signature(last.headers, last.body, [new]) and not verify_signature(last.headers, last.body, [old])


def test_the_client_refuses_old_timestamps(receiver) -> None:  # type: ignore[no-untyped-def]
    headers = {
        "TaskForge-Timestamp": str(int(time.time()) - 301),
        "TaskForge-Task-Id": "t",
        "TaskForge-Signature": "v1=00",
    }
    assert "replay" in (signature_problem(headers, b"{}", "s") or "")


# --- SSRF ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "localhost", "[::1]", "10.1.2.3", "192.168.0.10", "172.16.5.5", "169.254.169.254", "0.0.0.0",
     "[::ffff:127.0.0.1]", "224.0.0.1", "100.64.0.1", "[fe80::1]"],
)  # fmt: skip
def test_private_targets_are_refused_without_a_request(receiver, host) -> None:  # type: ignore[no-untyped-def]
    port = receiver.server.server_address[1]
    strict = pusher_loop.Pusher(worker_id="pusher-strict", allow_private=False)
    try:
        queue = push_queue(f"http://{host}:{port}/hook", max_retries=0)
        task_id = enqueue(queue)
        drive(strict, lambda: status(task_id) == "dead")
    finally:
        strict.close(grace=1)
    assert receiver.received == []
    error = Task.objects.get(id=task_id).last_error
    assert error.startswith("refused: ") and "may not reach" in error, error


def test_metrics_count_deliveries_by_outcome_and_in_flight(pusher, receiver, client) -> None:  # type: ignore[no-untyped-def]
    receiver.respond = lambda got: Reply(500) if got.attempt == 1 else Reply(200)
    queue = push_queue(receiver.url)
    task_id = enqueue(queue)
    drive(pusher, lambda: status(task_id) == "done")
    text = client.get("/metrics").content.decode()
    assert 'taskforge_push_deliveries_total{outcome="2xx",queue="hooks"} 1.0' in text
    assert 'taskforge_push_deliveries_total{outcome="5xx",queue="hooks"} 1.0' in text
    assert 'taskforge_push_deliveries_total{outcome="timeout",queue="hooks"} 0.0' in text
    assert 'taskforge_push_delivery_duration_seconds_count{queue="hooks"} 2.0' in text
    assert 'taskforge_push_in_flight{queue="hooks"} 0.0' in text


def test_two_push_queues_share_one_pushers_concurrency(receiver) -> None:  # type: ignore[no-untyped-def]
    receiver.respond = lambda _: Reply(200, delay=0.3)
    busy, quiet = push_queue(receiver.url, name="busy", max_concurrent=50), push_queue(receiver.url, name="quiet")
    for _ in range(40):
        enqueue(busy)
    quiet_task = enqueue(quiet)
    small = pusher_loop.Pusher(worker_id="pusher-small", concurrency=4, allow_private=True)
    try:
        drive(small, lambda: status(quiet_task) == "done", timeout=30)
    finally:
        small.close(grace=2)
    assert Task.objects.filter(queue=busy, status="done").count() < 40, "the quiet queue did not wait for the busy one"


def test_tls_certificates_are_verified(pusher, tmp_path) -> None:  # type: ignore[no-untyped-def]
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a self-signed certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    self_signed = Receiver(tls=context)
    try:
        queue = push_queue(self_signed.url, max_retries=0)
        task_id = enqueue(queue)
        drive(pusher, lambda: status(task_id) == "dead")
    finally:
        self_signed.stop()
    assert self_signed.received == []
    error = Task.objects.get(id=task_id).last_error
    assert error.startswith("connection error: ") and "CERTIFICATE_VERIFY_FAILED" in error, error


def test_a_rate_limited_push_queue_delivers_at_its_rate(pusher, receiver) -> None:  # type: ignore[no-untyped-def]
    queue = push_queue(receiver.url)
    Queue.objects.filter(id=queue.id).update(rate_limit=5, rate_burst=1)
    ids = [enqueue(queue) for _ in range(6)]
    drive(pusher, lambda: all(status(task_id) == "done" for task_id in ids), timeout=30)
    arrivals = sorted(r.at for r in receiver.received)
    assert arrivals[-1] - arrivals[0] >= 0.8, "six tasks at 5/s with a bucket of 1 take at least a second"
