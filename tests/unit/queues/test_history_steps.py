"""Per-step history from per-minute samples (queues.telemetry.history): increases, resets, gaps, percentiles."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from queues.telemetry.counters import BUCKETS
from queues.telemetry.history import quantile, steps

T0 = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def sample(minute: int, *, enqueued=0, done=0, failed=0, dead=0, expired=0, runs=None, waits=None):  # type: ignore[no-untyped-def]
    empty = [0] * len(BUCKETS)
    return SimpleNamespace(
        minute=T0 + minute * MINUTE,
        enqueued=enqueued,
        done=done,
        failed=failed,
        dead=dead,
        expired=expired,
        cancelled=0,
        run_buckets=runs or empty,
        wait_buckets=waits or empty,
    )


def cumulative(per_bucket: dict[float, int]) -> list[int]:
    out, running = [], 0
    for upper in BUCKETS:
        running += per_bucket.get(upper, 0)
        out.append(running)
    return out


def test_each_minute_is_what_its_counters_grew_by_until_the_next_sample():
    samples = [
        sample(0, enqueued=10, done=5),
        sample(1, enqueued=30, done=20, failed=2),
        sample(2, enqueued=31, done=30, failed=2),
    ]
    points = [s.point() for s in steps(samples, T0, T0 + 3 * MINUTE, MINUTE)]
    assert [(p["enqueued"], p["completed"], p["failed"]) for p in points[:2]] == [(20, 15, 2), (1, 10, 0)]
    assert points[2]["enqueued"] is None  # no later sample yet: not known


def test_steps_sum_their_minutes_and_a_missing_sampler_leaves_a_gap():
    samples = [sample(0), sample(1, done=3), sample(2, done=7), sample(6, done=8)]  # nothing sampled at 3, 4, 5
    points = [s.point() for s in steps(samples, T0, T0 + 8 * MINUTE, 2 * MINUTE)]
    assert [p["completed"] for p in points] == [7, 1, None, None]


def test_a_counter_reset_counts_from_zero_as_prometheus_reads_it():
    samples = [sample(0, done=100), sample(1, done=4)]  # Redis flushed in between
    assert steps(samples, T0, T0 + MINUTE, MINUTE)[0].point()["completed"] == 4


def test_percentiles_come_from_the_step_s_own_observations():
    before = cumulative({0.01: 50})
    after = cumulative({0.01: 50, 0.1: 90, 1: 10})  # this minute: 90 in (0.05, 0.1], 10 in (0.5, 1]
    point = steps([sample(0, runs=before), sample(1, runs=after)], T0, T0 + MINUTE, MINUTE)[0].point()
    assert 50 < point["run_p50_ms"] <= 100
    assert 500 < point["run_p95_ms"] <= 1000
    assert point["wait_p50_ms"] is None  # nothing claimed


@pytest.mark.parametrize(
    ("per_bucket", "q", "expected"),
    [
        ({0.005: 10}, 0.5, 0.0025),
        ({0.1: 4}, 1.0, 0.1),
        ({float("inf"): 3}, 0.5, 3600),  # past the last finite bound: that bound
        ({}, 0.5, None),
    ],
)
def test_quantile_interpolates_within_the_bucket(per_bucket, q, expected):
    counts = [per_bucket.get(upper, 0) for upper in BUCKETS]
    assert quantile(counts, q) == pytest.approx(expected) if expected is not None else quantile(counts, q) is None
