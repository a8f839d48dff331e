"""Fire times of schedules without a database: cron, intervals, daylight saving, lateness and catch-up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from queues.schedules import timing
from queues.schedules.timing import Timing, due_fires, fires_before, next_fire, upcoming

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "* * * * *",
        "0 3 * * *",
        "*/15 9-17 * * mon-fri",
        "0 0 1,15 * *",
        "0 0 * JAN,jul SUN",
        "0 12 * * 7",
        "30 0 9 * * *",
        "*/5 * * * * *",
        "0-30/10 * * * *",
    ],
)
def test_standard_expressions_are_valid(expression):
    assert timing.check_cron(expression) == expression


def test_extra_whitespace_is_normalised():
    assert timing.check_cron("  0   3 * *\t* ") == "0 3 * * *"


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("* * * *", "5 fields"),
        ("* * * * * * *", "5 fields"),
        ("@hourly", "5 fields"),
        ("", "5 fields"),
        ("61 * * * *", "Not a valid"),
        ("* * * * 8", "Not a valid"),
        ("* * * foo *", "Not a valid"),
        ("*/0 * * * *", "Not a valid"),
        ("0 0 L * *", "Not a cron field"),
        ("0 0 * * 1#2", "Not a cron field"),
        ("H * * * *", "Not a cron field"),
        ("0 0 ? * *", "Not a cron field"),
        ("0 0 30 2 *", "never matches"),
        ("60 * * * * *", "Not a valid"),
    ],
)
def test_invalid_expressions_say_why(expression, says):
    with pytest.raises(ValueError, match=says):
        timing.check_cron(expression)


@pytest.mark.parametrize("name", ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Etc/GMT+5"])
def test_iana_zones_are_valid(name):
    assert timing.check_timezone(name) == ZoneInfo(name)


@pytest.mark.parametrize("name", ["", "utc", "Mars/Olympus", "../../etc/passwd", "/usr/share/zoneinfo/UTC", "Europe/"])
def test_other_zone_names_are_refused(name):
    with pytest.raises(ValueError, match="Unknown time zone"):
        timing.check_timezone(name)


def test_fire_key_names_the_fire_time_in_utc():
    at = datetime(2026, 5, 20, 5, 0, tzinfo=ZoneInfo(BERLIN))
    assert timing.fire_key("nightly", at) == "schedule:nightly:2026-05-20T03:00:00Z"


# --- cron fire times -----------------------------------------------------------------------------


def test_next_fire_is_strictly_after():
    daily = Timing(cron="0 3 * * *")
    assert next_fire(daily, utc(2026, 5, 20, 3, 0)) == utc(2026, 5, 21, 3, 0)
    assert next_fire(daily, utc(2026, 5, 20, 2, 59, 59, 999999)) == utc(2026, 5, 20, 3, 0)


def test_six_fields_have_seconds_first():
    assert upcoming(Timing(cron="*/20 * * * * *"), utc(2026, 5, 20, 12, 0, 5), 3) == [
        utc(2026, 5, 20, 12, 0, 20),
        utc(2026, 5, 20, 12, 0, 40),
        utc(2026, 5, 20, 12, 1, 0),
    ]


def test_cron_is_read_in_its_time_zone():
    assert next_fire(Timing(cron="0 9 * * *", timezone=NEW_YORK), utc(2026, 1, 10)) == utc(2026, 1, 10, 14, 0)
    assert next_fire(Timing(cron="0 9 * * *", timezone=NEW_YORK), utc(2026, 7, 10)) == utc(2026, 7, 10, 13, 0)


def test_day_of_month_or_day_of_week_as_in_cron():
    fires = upcoming(Timing(cron="0 0 13 * fri"), utc(2026, 2, 1), 4)
    assert [f.day for f in fires] == [6, 13, 20, 27]


def test_names_of_months_and_days():
    (fire,) = upcoming(Timing(cron="0 0 * feb sun"), utc(2026, 1, 1), 1)
    assert fire == utc(2026, 2, 1)  # the first Sunday in February 2026


# --- daylight saving -----------------------------------------------------------------------------


def test_a_daily_time_in_the_spring_gap_fires_once_at_the_gaps_end():
    # Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00Z).
    fires = upcoming(Timing(cron="30 2 * * *", timezone=BERLIN), utc(2026, 3, 27), 3)
    assert fires == [utc(2026, 3, 27, 1, 30), utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0)]
    assert next_fire(Timing(cron="30 2 * * *", timezone=BERLIN), fires[-1]) == utc(2026, 3, 30, 0, 30)


def test_every_minute_of_the_gap_collapses_into_one_fire():
    fires = upcoming(Timing(cron="* 2 * * *", timezone=BERLIN), utc(2026, 3, 29, 0, 58), 2)
    assert fires == [utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 0)]


def test_a_daily_time_in_the_fall_back_repeat_fires_once_at_its_first_occurrence():
    # New York, 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 happens at 05:30Z and 06:30Z.
    daily = Timing(cron="30 1 * * *", timezone=NEW_YORK)
    fires = upcoming(daily, utc(2026, 10, 31), 3)
    assert fires == [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]


def test_the_repeated_hour_does_not_fire_again_when_starting_inside_it():
    quarterly = Timing(cron="*/15 * * * *", timezone=NEW_YORK)
    # 06:10Z is 01:10 EST, the second pass of 01:xx: the next fire is 02:00 EST (07:00Z).
    assert next_fire(quarterly, utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 1, 7, 0)
    hours = upcoming(Timing(cron="0 * * * *", timezone=NEW_YORK), utc(2026, 11, 1, 4, 30), 3)
    assert hours == [utc(2026, 11, 1, 5, 0), utc(2026, 11, 1, 7, 0), utc(2026, 11, 1, 8, 0)]


def test_backward_iteration_agrees_across_the_changes():
    for zone, start in ((BERLIN, utc(2026, 3, 28, 22)), (BERLIN, utc(2026, 10, 24, 22)), (NEW_YORK, utc(2026, 11, 1))):
        every_20 = Timing(cron="*/20 * * * *", timezone=zone)
        forward = upcoming(every_20, start, 30)
        assert fires_before(every_20, forward[-1] + timedelta(seconds=1), forward[0], 100) == forward


def test_fire_times_are_increasing_and_unique_over_a_year_of_changes():
    for zone in (BERLIN, NEW_YORK, "Australia/Lord_Howe"):  # Lord Howe moves by 30 minutes
        fires = upcoming(Timing(cron="*/30 * * * *", timezone=zone), utc(2026, 1, 1), 2 * 24 * 366)
        assert all(a < b for a, b in pairwise(fires))


# --- every_seconds -------------------------------------------------------------------------------


def test_an_interval_series_runs_through_its_anchor():
    every_90 = Timing(every_seconds=90, anchor=utc(2026, 5, 20, 12, 0, 7))
    assert upcoming(every_90, utc(2026, 5, 20, 12, 0, 7), 2) == [
        utc(2026, 5, 20, 12, 1, 37),
        utc(2026, 5, 20, 12, 3, 7),
    ]
    assert next_fire(every_90, utc(2026, 5, 20, 11, 59)) == utc(2026, 5, 20, 12, 0, 7)
    assert fires_before(every_90, utc(2026, 5, 20, 12, 0, 7), utc(2026, 5, 20, 11, 57), 10) == [
        utc(2026, 5, 20, 11, 57, 7),
        utc(2026, 5, 20, 11, 58, 37),
    ]
    plan = due_fires(every_90, utc(2026, 5, 20, 12, 0, 7), utc(2026, 5, 20, 12, 3, 30), "all")
    assert plan.fires == [utc(2026, 5, 20, 12, 0, 7), utc(2026, 5, 20, 12, 1, 37), utc(2026, 5, 20, 12, 3, 7)]
    assert plan.next_run_at == utc(2026, 5, 20, 12, 4, 37)


def test_without_an_anchor_intervals_count_from_the_epoch_whatever_the_zone():
    hourly = Timing(every_seconds=3600, timezone=BERLIN)
    assert next_fire(hourly, utc(2026, 3, 29, 0, 59, 59)) == utc(2026, 3, 29, 1, 0)
    assert upcoming(Timing(every_seconds=7), utc(1970, 1, 1), 2) == [
        utc(1970, 1, 1, 0, 0, 7),
        utc(1970, 1, 1, 0, 0, 14),
    ]
    assert next_fire(Timing(every_seconds=1), utc(2026, 5, 20, 12, 0, 0, 1)) == utc(2026, 5, 20, 12, 0, 1)


def test_fires_before_is_half_open_and_keeps_the_latest():
    every_10 = Timing(every_seconds=10)
    assert fires_before(every_10, utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 0, 30), 100) == [
        utc(2026, 1, 1, 0, 0, 30),
        utc(2026, 1, 1, 0, 0, 40),
        utc(2026, 1, 1, 0, 0, 50),
    ]
    assert fires_before(every_10, utc(2026, 1, 1, 0, 1), utc(2026, 1, 1), 2) == [
        utc(2026, 1, 1, 0, 0, 40),
        utc(2026, 1, 1, 0, 0, 50),
    ]


# --- lateness and catch-up -----------------------------------------------------------------------

NOW = utc(2026, 5, 20, 12, 0, 30)


def test_not_due_yet_fires_nothing():
    plan = due_fires(Timing(every_seconds=60), utc(2026, 5, 20, 12, 1), NOW, "all")
    assert plan == timing.Due(fires=[], next_run_at=utc(2026, 5, 20, 12, 1), skipped=False)


@pytest.mark.parametrize("catch_up", timing.CATCH_UP_POLICIES)
def test_late_fire_times_each_fire_whatever_the_policy(catch_up):
    plan = due_fires(Timing(every_seconds=10), utc(2026, 5, 20, 11, 59, 40), NOW, catch_up)
    assert plan.fires == [utc(2026, 5, 20, 11, 59, 40) + timedelta(seconds=10 * i) for i in range(6)]
    assert plan.next_run_at == utc(2026, 5, 20, 12, 0, 40)
    assert not plan.skipped


@pytest.mark.parametrize(
    ("catch_up", "missed"),
    [("none", []), ("latest", [utc(2026, 5, 20, 11, 59)]), ("all", [utc(2026, 5, 20, 11, m) for m in range(50, 60)])],
)
def test_missed_fire_times_follow_catch_up(catch_up, missed):
    plan = due_fires(Timing(cron="* * * * *"), utc(2026, 5, 20, 11, 50), NOW, catch_up)
    assert plan.fires == [*missed, utc(2026, 5, 20, 12, 0)]
    assert plan.next_run_at == utc(2026, 5, 20, 12, 1)
    assert plan.skipped == (catch_up != "all")


def test_catch_up_all_is_capped_at_100_keeping_the_latest():
    plan = due_fires(Timing(every_seconds=1), NOW - timedelta(days=30), NOW, "all")
    assert len(plan.fires) == timing.MAX_FIRES_PER_PASS
    assert plan.fires[-1] == NOW
    assert plan.fires[0] == NOW - timedelta(seconds=99)
    assert plan.skipped


def test_a_long_outage_of_a_seconds_cron_is_planned_quickly():
    plan = due_fires(Timing(cron="* * * * * *"), NOW - timedelta(days=7), NOW, "latest")
    assert len(plan.fires) == timing.LATE_GRACE_SECONDS + 2  # the latest missed, then 61 late ones
    assert plan.next_run_at == NOW + timedelta(seconds=1)
