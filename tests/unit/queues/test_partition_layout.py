"""Planning a round of the history's partitions (queues.partitions.layout): no database."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from queues.partitions.layout import (
    DAYS_AHEAD,
    EXTEND_WITHIN_DAYS,
    SAFETY,
    Leftover,
    Partition,
    day_start,
    leftover,
    name_for,
    plan,
    span_days,
)

DAY = timedelta(days=1)
TODAY = datetime(2027, 3, 10, tzinfo=UTC)
NOW = TODAY + timedelta(hours=14, minutes=5)


def day(offset: int) -> datetime:
    return TODAY + offset * DAY


def daily(offset: int) -> Partition:
    return Partition(name_for(day(offset), day(offset + 1)), day(offset), day(offset + 1))


def open_from(offset: int) -> Partition:
    return Partition(name_for(day(offset), None), day(offset), None)


def steady(first: int = -8, ahead: int = DAYS_AHEAD) -> list[Partition]:
    """What the maintenance keeps: days from ``first`` through ``ahead``, open-ended after them."""
    return [daily(offset) for offset in range(first, ahead + 1)] + [open_from(ahead + 1)]


def test_names_say_the_range():
    assert name_for(day(0), day(1)) == "tf_task_event_20270310"
    assert name_for(day(0), None) == "tf_task_event_from_20270310"
    assert name_for(day(0), day(3)) == "tf_task_event_20270310_20270313"
    assert day_start(NOW) == TODAY


def test_a_steady_layout_has_nothing_to_do():
    assert plan(steady(first=-7), [], NOW, retention_days=7).idle


def test_days_wholly_past_retention_are_dropped_and_the_one_straddling_the_cutoff_is_kept():
    todo = plan(steady(first=-10), [], NOW, retention_days=7)
    # The cutoff is day -7 at 14:05: day -8 ends at day -7 00:00, before it; day -7 ends after it.
    assert todo.expired == ("tf_task_event_20270228", "tf_task_event_20270301", "tf_task_event_20270302")
    assert todo.extension is None and todo.bound is None


def test_the_converted_table_goes_whole_once_its_bound_is_past_retention():
    converted = Partition("tf_task_event_before_20270301", None, day(-9))
    assert plan([converted, *steady(first=-9)], [], NOW, retention_days=7).expired[0] == converted.name
    assert converted.name not in plan([converted, *steady(first=-9)], [], NOW, retention_days=10).expired


def test_days_ahead_are_added_once_few_are_left_and_replace_the_open_ended_partition():
    assert plan(steady(ahead=2), [], NOW, retention_days=7).extension is None
    extension = plan(steady(ahead=1), [], NOW, retention_days=7).extension
    assert extension is not None
    assert extension.replaces == open_from(2)
    assert [p.name for p in extension.partitions] == [
        *(name_for(day(offset), day(offset + 1)) for offset in range(2, DAYS_AHEAD + 1)),
        name_for(day(DAYS_AHEAD + 1), None),
    ]
    # Contiguous: every new partition starts where the last one ended, from where coverage stood.
    bounds = [(p.lower, p.upper) for p in extension.partitions]
    assert bounds[0][0] == day(2)
    assert all(upper == lower for (_, upper), (lower, _) in itertools.pairwise(bounds))
    assert bounds[-1] == (day(DAYS_AHEAD + 1), None)


def test_an_open_ended_partition_that_takes_todays_events_is_bounded_not_detached():
    # The maintenance stopped: coverage by days ended yesterday, so today's events go to it.
    layout = [daily(offset) for offset in range(-3, 0)] + [open_from(0)]
    todo = plan(layout, [], NOW, retention_days=7)
    assert todo.bound == open_from(0)
    assert todo.extension is None
    # Starting less than a day ahead is bounded too: a detach could straddle midnight.
    almost = [*layout[:-1], daily(0), open_from(1)]
    assert plan(almost, [], NOW, retention_days=7).bound == open_from(1)


def test_without_an_open_ended_partition_coverage_resumes_where_the_days_end():
    # A round died between detaching the open-ended partition and attaching its successors.
    todo = plan([daily(offset) for offset in range(-2, 5)], [], NOW, retention_days=7)
    assert todo.extension is not None
    assert todo.extension.replaces is None
    assert todo.extension.partitions[0].lower == day(5)
    assert todo.extension.partitions[-1] == open_from(DAYS_AHEAD + 1)


def test_missed_past_days_become_one_partition_when_nothing_covers_now():
    todo = plan([daily(-5)], [], NOW, retention_days=7)
    assert todo.extension is not None
    first, second = todo.extension.partitions[:2]
    assert (first.name, first.lower, first.upper) == ("tf_task_event_20270306_20270310", day(-4), day(0))
    assert second == daily(0)
    assert plan([], [], NOW, retention_days=7).extension.partitions[0] == daily(0)  # type: ignore[union-attr]


def test_pending_detaches_are_finished_and_swept_with_their_rows_kept_unless_past_retention():
    expired = Partition("tf_task_event_20270301", day(-9), day(-8), detaching=True)
    replaced = Partition("tf_task_event_from_20270315", day(5), None, detaching=True)
    todo = plan([*steady(first=-7, ahead=4), expired, replaced], [], NOW, retention_days=7)
    assert todo.unfinished == (expired.name, replaced.name)
    assert set(todo.leftovers) == {Leftover(expired.name, keep_rows=False), Leftover(replaced.name, keep_rows=True)}


def test_leftovers_are_known_by_name_only():
    cutoff = NOW - 7 * DAY
    assert leftover("tf_task_event_20270301", cutoff) == Leftover("tf_task_event_20270301", keep_rows=False)
    assert leftover("tf_task_event_20270305", cutoff) == Leftover("tf_task_event_20270305", keep_rows=True)
    assert leftover("tf_task_event_from_20270301", cutoff) == Leftover("tf_task_event_from_20270301", keep_rows=True)
    assert leftover("tf_task_event_before_20270301", cutoff).keep_rows is False  # type: ignore[union-attr]
    assert leftover("tf_task_event_20270301_20270303", cutoff).keep_rows is False  # type: ignore[union-attr]
    # Anything else that merely starts like a partition is not ours to drop.
    for name in ("tf_task_event_archive", "tf_task_event_2027", "tf_task_event_from_20270301_20270302"):
        assert leftover(name, cutoff) is None
    todo = plan(steady(first=-7), ["tf_task_event_archive", "tf_task_event_20270318"], NOW, retention_days=7)
    assert todo.leftovers == (Leftover("tf_task_event_20270318", keep_rows=True),)


def test_rounds_at_any_hour_replace_the_open_ended_partition_and_never_need_to_bound_it():
    """A due extension always starts at least SAFETY ahead, whatever the hour the round runs."""
    assert timedelta(days=EXTEND_WITHIN_DAYS - 2) >= SAFETY
    partitions = steady(first=-7)
    moment = NOW
    for _ in range(24 * 12):  # a round every hour for twelve days
        moment += timedelta(hours=1)
        todo = plan(partitions, [], moment, retention_days=7)
        assert todo.bound is None, moment
        kept = [p for p in partitions if p.name not in todo.expired]
        if todo.extension is not None:
            kept = [p for p in kept if p != todo.extension.replaces] + list(todo.extension.partitions)
        partitions = kept
    assert partitions[-1].lower is not None and partitions[-1].lower >= day_start(moment) + EXTEND_WITHIN_DAYS * DAY
    assert partitions[0].lower == day_start(moment - 7 * DAY)


def test_a_long_retention_period_is_split_in_at_most_about_thirty_partitions():
    assert [span_days(days) for days in (1, 7, 30, 31, 365, 3650)] == [1, 1, 1, 2, 13, 122]
    extension = plan(steady(ahead=1), [], NOW, retention_days=365).extension
    assert extension is not None
    assert [(p.lower, p.upper) for p in extension.partitions] == [(day(2), day(15)), (day(15), None)]
    assert extension.partitions[0].name == "tf_task_event_20270312_20270325"
