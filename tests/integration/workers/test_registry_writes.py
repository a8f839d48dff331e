"""The worker registry writes a busy worker's times at most once per second per process."""

from __future__ import annotations

import time

import pytest

from workers import registry
from workers.models import Worker

pytestmark = pytest.mark.django_db(transaction=True)  # the throttle trusts committed writes only


def _last_claim(worker_id: str):  # type: ignore[no-untyped-def]
    return Worker.objects.get(worker_id=worker_id).last_claim_at


def test_calls_within_the_resolution_write_once(monkeypatch):
    monkeypatch.setattr(registry, "SEEN_RESOLUTION_SECONDS", 0.5)
    registry.seen("busy", claim=True)
    first = _last_claim("busy")
    registry.seen("busy", claim=True)
    assert _last_claim("busy") == first
    time.sleep(0.55)
    registry.seen("busy", claim=True)
    assert _last_claim("busy") > first


def test_each_kind_of_call_is_written_on_its_own(monkeypatch):
    monkeypatch.setattr(registry, "SEEN_RESOLUTION_SECONDS", 60)
    registry.seen("busy", claim=True)
    registry.seen("busy", heartbeat=True)
    worker = Worker.objects.get(worker_id="busy")
    assert worker.last_claim_at is not None
    assert worker.last_heartbeat_at is not None
