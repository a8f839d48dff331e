"""Claims on the real server: attempts on the thread pool, waits on the event loop (workers.longpoll.LongPoll).

The client sees one ordinary answer either way (never the internal 204), and
the access log has one line per claim.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from queues.apikeys import create_key
from tests.factories import QueueFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _claim_lines(live_stack) -> list[dict]:  # type: ignore[no-untyped-def]
    lines = []
    for log in live_stack.logs:
        for raw in log.read_text(errors="replace").splitlines():
            if raw.startswith("{"):
                entry = json.loads(raw)
                if entry.get("event") == "http.request" and entry.get("path") == "/workers/claim":
                    lines.append(entry)
    return lines


def test_claims_with_and_without_waiting(live_stack):
    QueueFactory(name="email_jobs")
    _, key = create_key("both", "admin")
    url = live_stack.start_api()
    claim = {"worker_id": "w1", "queue": "email_jobs", "max_tasks": 10, "wait_seconds": 5}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as client:
        for _ in range(3):
            assert client.post("/queues/email_jobs/tasks", json={"payload": {}}).status_code == 201
        started = time.monotonic()
        ready = client.post("/workers/claim", json=claim)
        assert ready.status_code == 200
        assert len(ready.json()["tasks"]) == 3
        assert time.monotonic() - started < 2  # answered at once, not after the wait

        # Nothing to claim: the poll waits on the event loop until a task arrives.
        threading.Timer(0.5, lambda: httpx.post(f"{url}/queues/email_jobs/tasks", json={"payload": {"late": True}},
                                                headers={"Authorization": f"Bearer {key}"})).start()  # fmt: skip
        started = time.monotonic()
        woken = client.post("/workers/claim", json=claim)
        assert woken.status_code == 200
        assert [t["payload"] for t in woken.json()["tasks"]] == [{"late": True}]
        assert 0.4 < time.monotonic() - started < 4

        # Nothing arrives: an empty answer after the wait.
        started = time.monotonic()
        empty = client.post("/workers/claim", json={**claim, "wait_seconds": 1})
        assert (empty.status_code, empty.json()) == (200, {"tasks": []})
        assert "x-taskforge-must-wait" not in empty.headers
        assert time.monotonic() - started >= 0.9

        # Bad input is refused the same way on both paths.
        bad = client.post("/workers/claim", json={**claim, "max_tasks": 0})
        assert bad.status_code == 400

    time.sleep(0.3)  # the last log lines reach the file
    statuses = sorted(line["status"] for line in _claim_lines(live_stack))
    assert statuses == [200, 200, 200, 400]


def test_a_poll_whose_client_left_claims_nothing(live_stack):
    QueueFactory(name="email_jobs")
    _, key = create_key("leaver", "admin")
    url = live_stack.start_api()
    headers = {"Authorization": f"Bearer {key}"}
    claim = {"worker_id": "leaver", "queue": "email_jobs", "max_tasks": 1, "wait_seconds": 5}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/workers/claim", json=claim, headers=headers, timeout=0.5)
    time.sleep(0.3)  # the server has seen the disconnect
    created = httpx.post(f"{url}/queues/email_jobs/tasks", json={"payload": {}}, headers=headers).json()
    time.sleep(1.0)  # a ghost poll would have claimed it by now
    task = httpx.get(f"{url}/queues/email_jobs/tasks/{created['id']}", headers=headers).json()
    assert task["status"] == "pending"


def test_a_waited_poll_counts_once_in_request_metrics(live_stack):
    QueueFactory(name="email_jobs")
    _, key = create_key("counted", "admin")
    url = live_stack.start_api()
    headers = {"Authorization": f"Bearer {key}"}
    claim = {"worker_id": "counted", "queue": "email_jobs", "max_tasks": 1, "wait_seconds": 1}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
        for _ in range(3):  # each waits out its second: several attempts apiece
            assert client.post("/workers/claim", json=claim).json() == {"tasks": []}
        metrics = client.get("/metrics").text
    by_view = [
        line
        for line in metrics.splitlines()
        if line.startswith("django_http_responses_total_by_status_view_method_total{") and 'view="worker-claim"' in line
    ]
    assert len(by_view) == 1, by_view
    assert 'status="200"' in by_view[0]
    assert by_view[0].endswith(" 3.0")
    requests = [
        line
        for line in metrics.splitlines()
        if line.startswith("django_http_requests_total_by_view_transport_method_total{")
        and 'view="worker-claim"' in line
    ]
    assert [line.rsplit(" ", 1)[1] for line in requests] == ["3.0"]
