"""The contract's output objects (API.md "Task object", "DLQ entry", history), built from plain rows.

The representations are pure functions of rows and unsaved model instances,
so their shape is checked here without a database.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from queues.api import outputs
from queues.models import DeadLetterTask, Queue
from tests.contract import QUEUE_FIELDS, TASK_FIELDS

AT = datetime(2026, 5, 19, 15, 0, tzinfo=UTC)

CONTRACT_TASK = list(TASK_FIELDS)


def task_row(**overrides: object) -> dict[str, object]:
    """A row as the lifecycle's statements return it: every column, including ones the contract hides."""
    row: dict[str, object] = {name: None for name in outputs.TASK_FIELDS}
    row.update(
        id=uuid.uuid4(),
        payload={"user_id": "abc123"},
        status="claimed",
        priority=3,
        scheduled_at=AT,
        created_at=AT,
        updated_at=AT,
        attempts=1,
        max_retries=3,
        queue_id=7,
        lease_token="secret-lease",
        lease_expires_at=AT,
    )
    row.update(overrides)
    return row


def test_a_task_has_exactly_the_contract_fields_in_order_and_its_queue_by_name():
    row = task_row()
    body = outputs.task(row, "email_jobs")
    assert list(body) == CONTRACT_TASK
    assert body["queue"] == "email_jobs"
    assert body["id"] == row["id"]
    assert body["payload"] == {"user_id": "abc123"}
    assert (body["priority"], body["attempts"], body["status"]) == (3, 1, "claimed")


def test_the_lease_is_shown_only_to_the_claim_that_granted_it():
    row = task_row()
    assert "lease_token" not in outputs.task(row, "q")
    claimed = outputs.task(row, "q", with_lease=True)
    assert list(claimed) == [*CONTRACT_TASK, "lease_token", "lease_expires_at"]
    assert claimed["lease_token"] == "secret-lease"
    assert claimed["lease_expires_at"] == AT


def test_a_queue_shows_its_settings_by_name():
    body = outputs.queue(Queue(name="email_jobs", max_retries=5, rate_limit=2.5, rate_burst=4, paused=True))
    assert body["name"] == "email_jobs"
    assert (body["max_retries"], body["rate_limit"], body["rate_burst"], body["paused"]) == (5, 2.5, 4, True)
    assert set(body) == set(QUEUE_FIELDS)
    assert "id" not in body  # queues are addressed by name only


def test_a_history_entry_keeps_the_five_contract_fields_and_drops_the_rest():
    event = {"at": AT, "from_status": "executing", "to_status": "retry", "worker_id": "w1", "detail": "boom", "id": 9}
    assert outputs.history_entry(event) == {
        "at": AT,
        "from_status": "executing",
        "to_status": "retry",
        "worker_id": "w1",
        "detail": "boom",
    }


def test_a_dead_letter_is_named_by_its_task_id():
    task_id = uuid.uuid4()
    entry = DeadLetterTask(
        task_id=task_id, payload={"n": 1}, last_error="timeout", attempts=4, died_at=AT, replay_count=2
    )
    assert outputs.dead_letter(entry, "email_jobs") == {
        "id": task_id,
        "queue": "email_jobs",
        "payload": {"n": 1},
        "last_error": "timeout",
        "attempts": 4,
        "died_at": AT,
        "replayed_at": None,
        "replay_count": 2,
    }
