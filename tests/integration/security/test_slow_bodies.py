"""Clients that trickle a request body hold no request thread.

Against a real server (gunicorn with the uvicorn worker, a few request
threads): 100 clients post a form body at ``/admin/login/`` one byte at a
time, with a made-up CSRF cookie so that Django's CSRF check would read the
body. Meanwhile the worker protocol and ``/healthz`` must keep answering.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import httpx
import pytest

from queues.apikeys import create_key
from tests.factories import QueueFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SLOW_CLIENTS = 100


@contextmanager
def trickling(url: str, path: str, clients: int) -> Iterator[list[socket.socket]]:
    """``clients`` connections each sending a POST body to ``path`` one byte every 0.2 s."""
    host = urlsplit(url)
    declared = 4000
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host.netloc}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {declared}\r\n"
        f"Cookie: csrftoken={'a' * 32}\r\n\r\n"
        "csrfmiddlewaretoken="
    ).encode()
    sockets = []
    for _ in range(clients):
        sock = socket.create_connection((host.hostname, host.port), timeout=10)
        sock.sendall(head)
        sockets.append(sock)
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.2):
            for sock in sockets:
                try:
                    sock.sendall(b"a")
                except OSError:
                    pass  # the server answered and closed: nothing more to send

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        yield sockets
    finally:
        stop.set()
        sender.join()
        for sock in sockets:
            sock.close()


def test_slow_form_bodies_at_the_admin_do_not_stall_the_worker_protocol(live_stack):
    QueueFactory(name="busy")
    _, key = create_key("slow-admin", "admin")
    # Fewer threads than slow clients by far, and a body deadline well past the test.
    url = live_stack.start_api(extra_env={"TASKFORGE_THREADS": "4", "TASKFORGE_BODY_TIMEOUT_SECONDS": "120"})
    headers = {"Authorization": f"Bearer {key}"}
    with trickling(url, "/admin/login/", SLOW_CLIENTS), httpx.Client(base_url=url, headers=headers) as client:
        time.sleep(1.0)  # every slow client is in, trickling
        assert client.get("/healthz", timeout=5).status_code == 200
        created = client.post("/queues/busy/tasks", json={"payload": {"n": 1}}, timeout=5)
        assert created.status_code == 201, created.text
        body = {"worker_id": "w-1", "queue": "busy"}
        (task,) = client.post("/workers/claim", json=body, timeout=5).json()["tasks"]
        lease = {"worker_id": "w-1", "task_id": task["id"], "lease_token": task["lease_token"]}
        assert client.post("/workers/heartbeat", json=lease, timeout=5).status_code == 200
        assert client.post("/workers/ack", json=lease, timeout=5).status_code == 200
        # A whole form still gets to Django: the login page answers it.
        assert client.get("/admin/login/", timeout=5).status_code == 200


def test_a_body_that_does_not_arrive_in_time_is_refused_in_the_error_shape(live_stack):
    url = live_stack.start_api(extra_env={"TASKFORGE_BODY_TIMEOUT_SECONDS": "1"})
    with trickling(url, "/admin/login/", 1) as (sock,):
        sock.settimeout(10)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}}"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 400"), answer
    assert b'"code":"validation_error"' in rest and b"did not arrive within 1 s" in rest


def test_an_oversized_admin_form_is_refused_before_it_is_read(live_stack, settings):
    url = live_stack.start_api(extra_env={"TASKFORGE_MAX_PAYLOAD_BYTES": "2048"})
    form = {"username": "x", "password": "y" * 4096}
    response = httpx.post(f"{url}/admin/login/", data=form, timeout=10)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
