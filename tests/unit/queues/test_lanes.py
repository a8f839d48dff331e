"""Lane scores and scheduled members: the arithmetic that orders claims across queues in Redis.

A lane's sorted-set score must order by priority first, then by ``scheduled_at``,
and stay exact in a double; these are pure functions of a task's fields.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from queues.dispatch.lanes import (
    due_ms,
    lane_score,
    parse_ids,
    ready_key,
    retry_member,
    scheduled_horizon_seconds,
    scheduled_key,
    scheduled_member,
)

NOON = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def test_a_higher_priority_always_comes_first_whatever_its_age():
    oldest_low = lane_score(2, datetime(2024, 1, 1, tzinfo=UTC))
    newest_high = lane_score(1, datetime(2300, 1, 1, tzinfo=UTC))
    assert newest_high < oldest_low


def test_within_a_priority_older_comes_first_down_to_ten_microseconds():
    assert lane_score(5, NOON) < lane_score(5, NOON + timedelta(microseconds=10))
    assert lane_score(5, NOON - timedelta(days=300)) < lane_score(5, NOON)
    # Below the 10 µs tick two instants share a score (ties are broken by the member).
    assert lane_score(5, NOON) == lane_score(5, NOON + timedelta(microseconds=9))


def test_every_score_is_exact_in_a_double():
    latest = lane_score(10, datetime(9999, 12, 31, tzinfo=UTC))
    earliest = lane_score(1, datetime(1970, 1, 1, tzinfo=UTC))
    assert 0 <= earliest <= latest < 2**53
    assert float(latest) == latest


def test_times_outside_a_band_are_clamped_into_it_not_spilled_into_the_next_priority():
    assert lane_score(3, datetime(2000, 1, 1, tzinfo=UTC)) == lane_score(3, datetime(2024, 1, 1, tzinfo=UTC))
    far_future_p3 = lane_score(3, datetime(9999, 1, 1, tzinfo=UTC))
    assert far_future_p3 < lane_score(4, datetime(2024, 1, 1, tzinfo=UTC))


def test_the_score_does_not_depend_on_the_time_zone_it_is_written_in():
    paris = NOON.astimezone(timezone(timedelta(hours=2)))
    assert lane_score(4, paris) == lane_score(4, NOON)
    assert due_ms(paris) == due_ms(NOON)


def test_due_time_is_unix_milliseconds():
    assert due_ms(datetime(1970, 1, 1, 0, 0, 1, 500_000, tzinfo=UTC)) == 1500
    assert due_ms(NOON) == int(NOON.timestamp()) * 1000


def test_members_and_keys_carry_the_ids_and_queue_hash_tag():
    task_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert scheduled_member(task_id, 42) == f"42|{task_id}"
    assert retry_member(task_id) == f"r|{task_id}"
    # One hash tag per queue: every script on a queue touches one cluster slot.
    assert ready_key("email") == "tf:{email}:ready"
    assert scheduled_key("email") == "tf:{email}:scheduled"


def test_parse_ids_keeps_uuids_from_bytes_or_text_and_drops_garbage():
    first, second = uuid.uuid4(), uuid.uuid4()
    members = [str(first).encode(), str(second), b"not-a-uuid", b"\xff\xfe", "r|" + str(first)]
    assert parse_ids(members) == [first, second]


@pytest.mark.parametrize(("tick", "horizon"), [(1.0, 3.0), (0.25, 1.5)])
def test_tasks_enter_the_scheduled_sets_more_than_a_scheduler_tick_ahead(settings, tick, horizon):
    settings.TASKFORGE_SCHEDULER_TICK = tick
    assert scheduled_horizon_seconds() == horizon
    assert scheduled_horizon_seconds() > tick
