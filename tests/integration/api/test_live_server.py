"""The production server command serves the API against the test database."""

from __future__ import annotations

import httpx
import pytest

from queues.apikeys import create_key
from tests.factories import QueueFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_two_api_processes_share_one_queue(live_stack):
    QueueFactory(name="shared")
    _, key = create_key("live", "admin")
    first = live_stack.start_api()
    second = live_stack.start_api()
    headers = {"Authorization": f"Bearer {key}"}
    created = httpx.post(f"{first}/queues/shared/tasks", json={"payload": {"n": 1}}, headers=headers)
    assert created.status_code == 201, created.text
    claimed = httpx.post(f"{second}/workers/claim", json={"worker_id": "w", "queue": "shared"}, headers=headers)
    assert [t["id"] for t in claimed.json()["tasks"]] == [created.json()["id"]]
