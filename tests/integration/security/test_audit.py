"""Operator actions through the API leave an audit line naming the API key."""

from __future__ import annotations

import logging

import pytest

from queues.apikeys import create_key
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client):
    _, raw = create_key("ops-bot", "admin")
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def _audit(caplog):
    return [(r.event, r.actor, getattr(r, "count", None)) for r in caplog.records if r.name == "taskforge.ops.audit"]


def test_purge_replay_and_discard_through_the_api_are_audited(client, operator, caplog):
    queue = QueueFactory(name="ops")
    TaskFactory(queue=queue)
    TaskFactory(queue=queue, retry_due=True)
    dead = [TaskFactory(queue=queue, dead=True) for _ in range(3)]
    caplog.set_level(logging.INFO, logger="taskforge.ops.audit")

    assert client.post("/queues/ops/purge", content_type="application/json", **operator).json() == {"purged": 2}
    assert (
        client.post(f"/queues/ops/dlq/{dead[0].id}/replay", content_type="application/json", **operator).status_code
        == 200
    )
    replay_all = client.post("/queues/ops/dlq/replay", {"all": True}, content_type="application/json", **operator)
    assert replay_all.json() == {"replayed": 2}
    # Discarding needs a dead task: the first one is pending again, so kill a fresh one.
    gone = TaskFactory(queue=queue, dead=True)
    assert client.delete(f"/queues/ops/dlq/{gone.id}", **operator).status_code == 204

    assert _audit(caplog) == [
        ("queue.purged", "api key ops-bot", 2),
        ("dlq.replayed", "api key ops-bot", 1),
        ("dlq.replayed", "api key ops-bot", 2),
        ("dlq.discarded", "api key ops-bot", 1),
    ]


def test_a_refused_action_is_not_audited(client, operator, caplog):
    QueueFactory(name="ops")
    caplog.set_level(logging.INFO, logger="taskforge.ops.audit")
    alive = TaskFactory(queue=QueueFactory(name="ops"))
    assert client.delete(f"/queues/ops/dlq/{alive.id}", **operator).status_code in (404, 409)
    assert _audit(caplog) == []
