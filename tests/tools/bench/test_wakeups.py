"""W4's wake-up probe: the round trips it times, against the real Postgres and Redis of the suite."""

from __future__ import annotations

import itertools
import time

import pytest
from django.conf import settings

from bench import report, wakeups
from tests import live


def test_each_round_is_timed_after_its_idle_spell():
    calls: list[float] = []

    def call() -> None:
        calls.append(time.perf_counter())

    median = wakeups.round_trip_ms(call, idle_seconds=0.01, rounds=6)
    measured = calls[wakeups.WARM_UP_ROUNDS :]
    assert len(measured) == 6
    # Each measured call follows its own sleep; the warm-up calls do not.
    assert all(later - earlier >= 0.01 for earlier, later in itertools.pairwise(measured))
    assert median >= 0


@pytest.mark.django_db
def test_postgres_and_redis_are_probed_back_to_back_and_after_idle():
    for trips in (
        wakeups.postgres(live.test_database_url(), rounds=3),
        wakeups.redis_server(settings.REDIS_URL, rounds=3),
    ):
        assert trips.back_to_back_ms > 0
        assert trips.after_idle_ms > 0


def test_the_machine_record_names_how_idle_cpus_wait_where_linux_says():
    machine = report.machine()
    assert set(wakeups.idle_policy()) <= set(machine)
    for name, value in wakeups.idle_policy().items():
        assert machine[name] == value and value
