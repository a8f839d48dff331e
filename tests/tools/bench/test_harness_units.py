"""The benchmark harness's own arithmetic and configuration (no servers needed)."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable

import pytest

from bench import config, peer, peers, report, sequential, single_calls
from bench.figures import Figure, Figures, percentile
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


def test_new_workloads_are_selectable_and_small_in_quick_mode():
    full = config.from_env({})
    quick = config.from_env({"BENCH_QUICK": "1", "BENCH_ONLY": "w0,W3N, w3d,W8,calls"})
    for name in ("W0", "W3N", "W3D", "W8", "CALLS"):
        assert quick.wants(name)
    assert not quick.wants("W3")
    assert (full.naive_threads, full.worker_processes) == (4, 2)
    assert quick.w0_seconds < full.w0_seconds and quick.w8_seconds < full.w8_seconds
    assert quick.calls_per_endpoint < full.calls_per_endpoint
    assert quick.defaults_tasks < full.defaults_tasks
    assert len({full.redis_db, full.celery_redis_db, full.huey_redis_db, full.pgqueuer_redis_db}) == 4


def test_sequential_run_times_only_the_window_after_the_warm_up():
    calls: list[float] = []
    marks: list[int] = []

    def call() -> int:
        calls.append(time.perf_counter())
        time.sleep(0.002)
        return len(calls)

    window = sequential.run(
        call, 0.05, warmup=0.02, on_window_start=lambda: marks.append(len(calls)), keep_results=True
    )
    assert marks and 0 < marks[0] < window.total_calls
    assert window.calls == len(window.latencies_ms) == window.total_calls - marks[0]
    assert window.results == list(range(1, window.total_calls + 1))
    assert all(latency >= 2.0 for latency in window.latencies_ms)
    assert 0.04 < window.seconds < 1.0 and window.rate == window.calls / window.seconds


def test_sequential_window_survives_its_json_line():
    window = sequential.Window(calls=2, started=10.0, ended=12.0, latencies_ms=[1.0, 2.0], total_calls=3)
    summary = dataclasses.asdict(window)
    summary["ids"] = summary.pop("results") or ["a", "b", "c"]
    parsed, ids, overhead = sequential.from_json(json.dumps(summary))
    assert parsed == window and ids == ["a", "b", "c"] and overhead is None
    assert parsed.rate == 1.0
    assert sequential.Window().rate == 0.0
    summary["overhead"] = {"client_cpu_ms": 0.5, "bare_cpu_ms": 0.6, "overhead_ms": -0.1}
    assert sequential.from_json(json.dumps(summary))[2] == summary["overhead"]


def test_client_overhead_alternates_rounds_and_keeps_every_id():
    order: list[str] = []

    def call(name: str, spin: int) -> Callable[[], str]:
        def one() -> str:
            sum(range(spin))  # CPU, which the measure reads
            order.append(name)
            return f"{name}-{len(order)}"

        return one

    measured = sequential.client_overhead(call("client", 20_000), call("bare", 2_000), calls=20, rounds=3)
    assert order == (["client"] * 20 + ["bare"] * 20) * 3
    assert len(measured["ids"]) == 120 and len(set(measured["ids"])) == 120
    assert measured["client_cpu_ms"] > measured["bare_cpu_ms"] > 0
    assert measured["overhead_ms"] == measured["client_cpu_ms"] - measured["bare_cpu_ms"]


def test_not_measured_figures_are_reported_with_their_reason():
    figures = Figures()
    figures.define("W0", "Huey enqueue tasks/s (1 producer)", "tasks/s")
    figures.define("W0", "TaskForge / Huey enqueue", "x", (">=", 0.6))
    figures.define("W0", "unselected", "tasks/s")
    figures.skip("W0", "Huey enqueue tasks/s (1 producer)", "huey not installed")
    figures.skip("W0", "Huey enqueue tasks/s (1 producer)", "a later reason does not replace the first")
    figures.add("W0", "TaskForge / Huey enqueue", 0.7)
    reported = [f for f in figures if f.reported]
    assert [f.name for f in reported] == ["Huey enqueue tasks/s (1 producer)", "TaskForge / Huey enqueue"]
    skipped = reported[0]
    assert skipped.met() is None and skipped.as_dict()["not_measured"] == "huey not installed"
    printed = report.table(reported)
    assert "not measured [1]" in printed
    assert printed.splitlines()[-1] == "[1] huey not installed"
    assert "0.70x" in printed and "yes" in printed
    figures.define("W0", "Huey enqueue p99", "ms")
    figures.skip("W0", "Huey enqueue p99", "huey not installed")
    twice = report.table([f for f in figures if f.reported])
    assert twice.count("not measured [1]") == 2 and twice.count("huey not installed") == 1
    figures.recording = False
    figures.skip("W0", "unselected", "profiling runs never mark a figure")
    assert not figures.items[("W0", "unselected")].reported


def test_peer_failures_and_missing_packages_read_in_one_line():
    assert peers.failure(RuntimeError("worker exited:\ntraceback\n\nAttributeError: boom")) == (
        "failed: RuntimeError: worker exited: ... AttributeError: boom"
    )
    assert peers.failure(ValueError("short")) == "failed: ValueError: short"
    assert peers.failure(KeyError()) == "failed: KeyError: "
    assert peer.missing("json") is None
    assert "no_such_package_here" in (peer.missing("json", "no_such_package_here") or "")


def test_trickle_rate_counts_tasks_done_during_the_window():
    window = sequential.Window(calls=500, started=100.0, ended=104.0, total_calls=700)
    assert peer.Trickle(window, done_in_window=2000).rate == 500.0
    assert peer.Trickle(sequential.Window(), done_in_window=3).rate == 0.0


def test_calls_are_dealt_round_robin_over_the_connections():
    assert single_calls.split(list(range(7)), 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert single_calls.split([1, 2], 4) == [[1], [2]]
    assert single_calls.split([], 4) == [[]]
    lease = single_calls.Lease("w-1", "t-1", "tok")
    assert lease.body(error="x") == {"worker_id": "w-1", "task_id": "t-1", "lease_token": "tok", "error": "x"}
    assert single_calls.figure_name("claim") == "API CPU per call: claim (max_tasks=1)"
