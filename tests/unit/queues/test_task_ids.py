"""New task ids: UUIDs of version 7 that begin with the time they were made (RFC 9562)."""

from __future__ import annotations

import time
import uuid

from queues.lifecycle.ids import new_task_ids


def test_ids_are_version_7_uuids_of_the_rfc_variant() -> None:
    for task_id in new_task_ids(200):
        assert task_id.version == 7
        assert task_id.variant == uuid.RFC_4122
        assert uuid.UUID(str(task_id)) == task_id  # the canonical text reads back as the same id


def test_ids_begin_with_the_millisecond_they_were_made() -> None:
    before = time.time_ns() // 1_000_000
    made = new_task_ids(3)
    after = time.time_ns() // 1_000_000
    assert all(before <= task_id.int >> 80 <= after for task_id in made)  # the first 48 bits: Unix ms


def test_ids_of_one_batch_are_distinct() -> None:
    batches = [new_task_ids(1_000) for _ in range(20)]
    every = [task_id for batch in batches for task_id in batch]
    assert len(set(every)) == len(every) == 20_000
    assert new_task_ids(0) == []


def test_ids_made_later_sort_after_earlier_ones_as_uuids_and_as_text() -> None:
    made = []
    for _ in range(5):
        made.extend(new_task_ids(2))
        time.sleep(0.002)  # past the millisecond: the time bits decide
    pairs = list(zip(made[::2], made[2::2], strict=False))  # one id of each batch against the next batch's
    assert all(earlier < later and str(earlier) < str(later) for earlier, later in pairs)


def test_the_random_bits_differ_between_ids_made_in_the_same_instant() -> None:
    low_62_bits = (1 << 62) - 1
    randoms = {task_id.int & low_62_bits for task_id in new_task_ids(500)}
    assert len(randoms) == 500
