"""Request metrics: the lean edge's record moves what Django's middleware moves; batched writes to shared files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest
from rest_framework.test import APIClient

from taskforge.ops.request_metrics import record_request
from tests.integration.observability.scrape import Samples, parse

pytestmark = pytest.mark.django_db

# Their observations are times: compared by how many, not by which bucket.
LATENCY_FAMILIES = (
    "django_http_requests_latency_including_middlewares_seconds",
    "django_http_requests_latency_seconds_by_view_method",
)


def _request_samples() -> Samples:
    samples = parse(generate_latest(REGISTRY).decode())
    return {
        (name, labels): amount
        for (name, labels), amount in samples.items()
        if name.startswith("django_http_") and not name.endswith("_created")
    }


def _moved(before: Samples, after: Samples) -> Samples:
    """What changed, latencies reduced to their counts."""
    moved = {}
    for key, amount in after.items():
        name = key[0]
        if name.startswith(LATENCY_FAMILIES) and not name.endswith("_count"):
            continue
        if amount != before.get(key, 0.0):
            moved[key] = amount - before.get(key, 0.0)
    return moved


AJAX = {"HTTP_X_REQUESTED_WITH": "XMLHttpRequest"}
CASES = {
    "created": ("/queues/email_jobs/tasks", b'{"payload": {"n": 1}}', "application/json", {}),
    "bad body": ("/queues/email_jobs/tasks", b'{"payload": 1, "delay_seconds": -4}', "application/json", {}),
    "unknown queue": ("/queues/nowhere/tasks", b'{"payload": {}}', "application/json", {}),
    "refused before a view": ("/queues/email_jobs/tasks", b"n=1", "application/x-www-form-urlencoded", {}),
    "over https": ("/queues/email_jobs/tasks", b'{"payload": {}}', "application/json", {"secure": True}),
    "ajax": ("/queues/email_jobs/tasks", b'{"payload": {}}', "application/json", AJAX),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_lean_record_moves_the_series_djangos_middleware_moves(producer: APIClient, queue, case: str) -> None:  # type: ignore[no-untyped-def]
    path, body, content_type, extra = CASES[case]
    before = _request_samples()
    answered = producer.post(path, data=body, content_type=content_type, **extra)
    through_django = _moved(before, _request_samples())

    resolved = getattr(answered.wsgi_request, "resolver_match", None)
    view_name = resolved.view_name if resolved is not None else None
    before = _request_samples()
    record_request(
        "POST",
        view_name,
        answered.status_code,
        len(body),
        answered.content,
        time.perf_counter(),
        secure=bool(extra.get("secure")),
        ajax="HTTP_X_REQUESTED_WITH" in extra,
    )
    recorded = _moved(before, _request_samples())

    assert through_django, "Django's middleware moved no series"
    assert recorded == through_django, (answered.status_code, set(recorded) ^ set(through_django))


# Run in a process of its own: prometheus_client picks file-backed values when it is first imported.
BATCHES = """
import json, os, sys, time
import django
django.setup()
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from taskforge.ops import metric_batches
from taskforge.ops.prometheus import render_metrics
from taskforge.ops.request_metrics import record_request

NAME = "django_http_responses_total_by_status_view_method_total"

def in_files():
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == NAME and sample.labels.get("view") == "task-list":
                return sample.value
    return 0.0

def request():
    record_request("POST", "task-list", 201, 20, b"{}", time.perf_counter())

seen = {}
# A longer window than the shipped one, so that a slow machine's pauses cannot end it between two steps.
metric_batches._window.seconds = window = 0.5
time.sleep(window * 2)
request()
seen["a lone request"] = in_files()
request()
seen["the second, within the window"] = in_files()
request()
text = render_metrics()[0].decode()
seen["rendered"] = [line for line in text.splitlines() if line.startswith(NAME + "{") and "task-list" in line]
request()
seen["the fourth, within the window"] = in_files()
time.sleep(window * 3)
seen["the fourth, after the window"] = in_files()
request()
seen["the fifth, after a quiet spell"] = in_files()
request()
pid = os.fork()
if pid == 0:
    metric_batches.write_pending()
    os._exit(0)
os.waitpid(pid, 0)
seen["the sixth, after a forked child wrote"] = in_files()
metric_batches.write_pending()
seen["the sixth, written"] = in_files()
request()
print(json.dumps(seen))
"""


def test_request_metrics_reach_the_shared_files_in_batches(tmp_path: Path) -> None:
    environment = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", BATCHES], env=environment, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["a lone request"] == 1.0  # a quiet process writes at once
    assert seen["the second, within the window"] == 1.0  # batched with what follows
    assert len(seen["rendered"]) == 1 and seen["rendered"][0].endswith(" 3.0")  # a scrape writes the pending first
    assert seen["the fourth, within the window"] == 3.0
    assert seen["the fourth, after the window"] == 4.0  # the writer thread, at the window's end
    assert seen["the fifth, after a quiet spell"] == 5.0
    assert seen["the sixth, after a forked child wrote"] == 5.0  # the child did not write the parent's move
    assert seen["the sixth, written"] == 6.0

    # The last request, moved within the window before the process exited: written at exit.
    check = f"""
import os
os.environ["PROMETHEUS_MULTIPROC_DIR"] = {str(tmp_path)!r}
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
registry = CollectorRegistry()
MultiProcessCollector(registry)
NAME = "django_http_responses_total_by_status_view_method_total"
samples = [s for f in registry.collect() for s in f.samples if s.name == NAME]
print(sum(s.value for s in samples if s.labels.get("view") == "task-list"))
"""
    total = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=True)
    assert float(total.stdout.strip()) == 7.0
