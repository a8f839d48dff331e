"""The benchmark harness's own arithmetic and configuration (no servers needed)."""

from __future__ import annotations

import math

import pytest

from bench import config
from bench.figures import Figure, percentile
from bench.ratelimit import largest_window
from bench.stack import celery_broker_url, database_url_for, redis_url_for_db


def test_percentile_is_nearest_rank():
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_figure_median_and_targets():
    fast = Figure("W1", "enqueue tasks/s", "tasks/s", (">=", 1000), values=[900.0, 1200.0, 1100.0])
    assert fast.median == 1100.0
    assert fast.met() is True
    slow = Figure("W1", "enqueue p99", "ms", ("<=", 50), values=[60.0, 40.0, 70.0])
    assert slow.met() is False
    rate = Figure("W7", "mean", "tasks/s", ("within", (49.0, 51.0)), values=[50.4])
    assert rate.met() is True
    assert Figure("W3", "naive", "tasks/s", values=[5.0]).met() is None
    summary = fast.as_dict()
    assert (summary["median"], summary["min"], summary["max"]) == (1100.0, 900.0, 1200.0)
    assert summary["runs"] == [900.0, 1200.0, 1100.0]


def test_largest_window_counts_half_open_one_second_windows():
    assert largest_window([]) == 0
    assert largest_window([0.0, 0.5, 0.99, 1.0, 1.5]) == 3  # [0, 1) holds 0, 0.5, 0.99
    assert largest_window([0.0, 1.0, 2.0, 3.0]) == 1
    assert largest_window([5.0] * 10 + [5.5] * 10) == 20


def test_quick_mode_and_overrides_from_the_environment():
    full = config.from_env({})
    assert (full.runs, full.w3_tasks, full.w6_history) == (3, 10_000, 1_000_000)
    quick = config.from_env({"BENCH_QUICK": "1", "BENCH_W3_TASKS": "500", "BENCH_ONLY": "w1, W3b"})
    assert quick.quick and quick.runs == 1 and quick.w3_tasks == 500
    assert quick.wants("W1") and quick.wants("w3b") and not quick.wants("W3")
    assert config.from_env({"BENCH_PROFILE": "0"}).profile is False


@pytest.mark.parametrize(
    ("url", "db", "redis_url", "broker"),
    [
        ("redis://127.0.0.1:6379/0", 15, "redis://127.0.0.1:6379/15", "redis://127.0.0.1:6379/15"),
        ("unix:///tmp/r.sock", 14, "unix:///tmp/r.sock?db=14", "redis+socket:///tmp/r.sock?virtual_host=14"),
        ("unix:///tmp/r.sock?db=3", 14, "unix:///tmp/r.sock?db=14", "redis+socket:///tmp/r.sock?virtual_host=14"),
    ],
)
def test_dedicated_redis_databases(url, db, redis_url, broker):
    assert redis_url_for_db(url, db) == redis_url
    assert celery_broker_url(url, db) == broker


def test_dedicated_database_keeps_the_server():
    assert database_url_for("postgres://u@127.0.0.1:5432/app", "taskforge_bench") == (
        "postgres://u@127.0.0.1:5432/taskforge_bench"
    )
    assert database_url_for("postgresql://postgres@/postgres?host=/x/pgdata", "b") == (
        "postgresql://postgres@/b?host=/x/pgdata"
    )
