"""The capacity model's arithmetic and the meter's bookkeeping (no servers needed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import capacity, capacity_page, config, costs
from bench.meter import DatabaseWal, ProcessCpu, Reading, busy_seconds, command_counts, command_difference
from bench.stack import dedicated_redis_argv
from queues.dispatch import lanes

# Unit costs as a CAP run reports them (round numbers, so the expected values can be worked by hand).
FIGURES = {
    "batch: API CPU per task": 400.0,
    "batch: Postgres CPU per task": 300.0,
    "batch: Redis CPU per task": 40.0,
    "batch: loops CPU per task": 10.0,
    "batch: worker CPU per task": 100.0,
    "batch: WAL bytes per task": 4000.0,
    "batch: Postgres commits per 1,000 tasks": 40.0,
    "batch: Redis commands per 1,000 tasks": 2500.0,
    "enqueue: API CPU per task": 100.0,
    "enqueue: Postgres CPU per task": 100.0,
    "enqueue: Redis CPU per task": 5.0,
    "enqueue: WAL bytes per task": 1000.0,
    "enqueue: Postgres commits per 1,000 tasks": 10.0,
    "vacuum: Postgres CPU per task": 20.0,
    "vacuum: WAL bytes per task": 200.0,
    "prune: Postgres CPU per task": 80.0,
    "prune: loops CPU per task": 5.0,
    "prune: WAL bytes per task": 800.0,
    "Postgres bytes per pending task": 700.0,
    "Postgres bytes per done task": 1600.0,
    "Postgres bytes per done task, compacted": 1100.0,
    "Redis bytes per lane entry": 150.0,
    "single: API CPU per task": 6000.0,
    "single: Postgres CPU per task": 2000.0,
    "single: WAL bytes per task": 4200.0,
}


def test_a_cap_run_read_back_as_unit_costs():
    unit = capacity.unit_costs(FIGURES)
    assert (unit.api, unit.postgres, unit.redis, unit.commits, unit.redis_commands) == (400, 300, 40, 0.04, 2.5)
    assert unit.postgres_steady == 300 + 20 + 80
    assert unit.wal_steady == 4000 + 200 + 800
    shared = capacity.unit_costs({k: v for k, v in FIGURES.items() if "Redis CPU" not in k and "commands" not in k})
    assert shared.redis is None and shared.redis_commands is None


def test_cores_and_throughput_are_inverse():
    assert capacity.throughput(2, 500) == 4000
    assert capacity.throughput(-0.5, 500) == 0
    assert capacity.cores_for(4000, 500, utilization=1.0) == 2
    assert capacity.cores_for(4000, 500, utilization=0.5) == 4


def test_steady_sizing_at_5000_tasks_per_second():
    sizing = capacity.steady(capacity.unit_costs(FIGURES), 5000, utilization=0.5, days=7)
    assert sizing.api_cores == pytest.approx(5000 * 400e-6 / 0.5)  # 4 cores
    assert sizing.postgres_cores == pytest.approx(5000 * 400e-6 / 0.5)  # lifecycle + vacuum + prune
    assert sizing.redis_cores == pytest.approx(0.4)
    assert sizing.loop_cores == pytest.approx(5000 * 15e-6 / 0.5)
    assert sizing.wal_bytes_per_second == 5000 * 5000
    assert sizing.wal_bytes_per_day == 5000 * 5000 * 86_400
    assert sizing.commits_per_second == pytest.approx(200)
    assert sizing.redis_commands_per_second == 12_500
    retained = 5000 * 86_400 * 7
    assert sizing.disk_bytes == (retained * 1100, retained * 1600)


def test_a_burst_waits_in_postgres_and_drains_at_the_spare_capacity():
    unit = capacity.unit_costs(FIGURES)
    burst = capacity.burst(unit, rate=50_000, seconds=60, steady_rate=5000, utilization=0.5)
    drain = 10_000  # the deployment sized for 5,000/s at 50 % drains 10,000/s
    assert burst.backlog == (50_000 - drain) * 60
    assert burst.backlog_bytes == burst.backlog * 700
    assert burst.lane_bytes == lanes.LANE_CAPACITY * 150  # the lane holds ids, not the backlog
    assert burst.drain_seconds == pytest.approx(burst.backlog / (drain - 5000))
    # Enqueueing the burst, plus claims and acks at the drain rate.
    assert burst.api_cores == pytest.approx((50_000 * 100e-6 + drain * 300e-6) / 0.5)
    assert burst.postgres_cores == pytest.approx((50_000 * 100e-6 + drain * 200e-6) / 0.5)
    assert burst.wal_bytes_per_second == 50_000 * 1000 + drain * 3000
    small = capacity.burst(unit, rate=8000, seconds=60, steady_rate=5000, utilization=0.5)
    assert small.backlog == 0 and small.drain_seconds == 0
    flat_out = capacity.burst(unit, rate=50_000, seconds=60, steady_rate=5000, utilization=1.0)
    assert math.isinf(flat_out.drain_seconds)


def test_one_primary_tops_out_where_its_cores_are_spent():
    limit = capacity.primary_limit(capacity.unit_costs(FIGURES), 64, utilization=0.5)
    assert limit.rate == pytest.approx(64 * 0.5 / 400e-6)  # 80,000 tasks/s
    assert limit.wal_bytes_per_second == pytest.approx(limit.rate * 5000)
    assert limit.commits_per_second == pytest.approx(limit.rate * 0.04)


def test_the_machine_figure_adds_every_process_a_task_needs():
    per_task = {"api": 400.0, "postgres": 300.0, "redis": None, "loops": 10.0, "workers": 100.0}
    assert capacity.machine_cpu_per_task(per_task | {"load generator": 50.0}) == 860.0
    assert capacity.machine_cpu_per_task(per_task) == 810.0


def test_the_lane_capacity_is_the_dispatchers():
    assert capacity.LANE_CAPACITY == lanes.LANE_CAPACITY


def _run(figures: dict[str, float], **extra: object) -> dict[str, object]:
    return {
        "complete": True,
        "started_at": "2026-12-02T10:00:00+00:00",
        "git": {"commit": "abcdef1234", "dirty": False},
        "settings": {"bench": {"only": ["CAP"], "runs": 3, "peers": False, "dedicated_redis": True}},
        "load_average_at_start": [0.4, 0.5, 0.6],
        "load_average_at_end": [1.2, 0.8, 0.7],
        "figures": [{"workload": "CAP", "figure": name, "median": value} for name, value in figures.items()]
        + [{"workload": "W1", "figure": "enqueue tasks/s", "median": 500.0}],
        **extra,
    }


def test_the_newest_run_that_measured_cap_is_the_source(tmp_path: Path):
    (tmp_path / "20261201T000000Z.json").write_text(json.dumps(_run(FIGURES)))
    (tmp_path / "20261202T000000Z.json").write_text(json.dumps(_run(FIGURES, failures={"CAP": "boom"})))
    (tmp_path / "20261203T000000Z.json").write_text(json.dumps(_run({})))
    shared_redis = _run(FIGURES)
    shared_redis["settings"] = {"bench": {"runs": 3}}  # a full make bench: Redis shared, not metered
    (tmp_path / "20261204T000000Z.json").write_text(json.dumps(shared_redis))
    path, run = capacity.newest_capacity_run(tmp_path)
    assert path.name == "20261201T000000Z.json"
    assert capacity.medians(run)["batch: API CPU per task"] == 400.0
    assert "enqueue tasks/s" not in capacity.medians(run)
    assert capacity.command(run) == "BENCH_ONLY=CAP BENCH_PEERS=0 BENCH_DEDICATED_REDIS=1 make bench"
    with pytest.raises(SystemExit):
        capacity.newest_capacity_run(tmp_path / "none")


def test_the_pages_name_their_source_and_show_the_predictions():
    pages = capacity_page.render(Path("bench/results/20261201T000000Z.json"), _run(FIGURES))
    assert set(pages) == {"costs.md", "steady.md", "burst.md", "primary.md", "check.md"}
    assert all(page.startswith("<!-- Written by `python -m bench.capacity`") for page in pages.values())
    assert "`BENCH_ONLY=CAP BENCH_PEERS=0 BENCH_DEDICATED_REDIS=1 make bench`" in pages["costs.md"]
    assert "commit `abcdef1`" in pages["costs.md"] and "load average 0.4 at the start" in pages["costs.md"]
    assert "| API CPU (µs) | 100 | 400 | - | 6,000 | - | - |" in pages["costs.md"]
    steady = capacity.steady(capacity.unit_costs(FIGURES), capacity.STEADY_RATE)
    assert f"| API cores | {steady.api_cores:,.1f} |" in pages["steady.md"]
    assert "| 64 cores |" in pages["primary.md"]
    assert "| measured / predicted | not measured |" in pages["check.md"]


def test_the_spread_between_repetitions_is_written_under_the_costs():
    run = _run(FIGURES)
    assert capacity_page.variation(run) == ""  # no repetitions recorded: nothing to say
    run["figures"] += [
        {"workload": "CAP", "figure": "check: CPU per task, every process (paced run)", "min": 990.0, "max": 1281.0},
        {"workload": "CAP", "figure": "batch: cores the rest of the machine took", "min": 0.9, "max": 1.52},
    ]
    assert capacity.spread(run, "batch: cores the rest of the machine took") == (0.9, 1.52)
    assert capacity_page.variation(run) == (
        "Over the 3 runs, the batch stage's CPU per task, every process together, went from 990 to 1,281 µs "
        "while the rest of the machine took 0.9 to 1.5 of its cores."
    )


def test_each_runs_check_is_listed_with_how_busy_the_machine_was():
    run = _run({})
    assert capacity_page.per_run(run) == ""
    run["figures"] += [
        {"workload": "CAP", "figure": "check: measured / predicted", "runs": [1.143, 0.878]},
        {"workload": "CAP", "figure": "saturated: busy cores, whole machine", "runs": [1.945, 1.823]},
        {"workload": "CAP", "figure": "saturated: cores the rest of the machine took", "runs": [0.672, 0.018]},
    ]
    assert capacity_page.per_run(run) == (
        "Measured / predicted in each run: 1.14 (1.95 cores busy, 0.67 taken by the rest); "
        "0.88 (1.82 cores busy, 0.02 taken by the rest)."
    )


def test_sizes_read_in_decimal_units():
    assert capacity_page._size(950) == "950 B"
    assert capacity_page._size(12_300) == "12.3 kB"
    assert capacity_page._size(2.7e12) == "2.7 TB"
    assert capacity_page._duration(90) == "90 s" and capacity_page._duration(1200) == "20 min"
    assert capacity_page._duration(math.inf) == "never"


# --- the meter ----------------------------------------------------------------------------------


def test_busy_time_leaves_out_idle_and_iowait(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("os.sysconf", lambda name: 100)
    line = "cpu  1000 10 200 5000 300 0 40 50 7 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n"
    assert busy_seconds(line) == pytest.approx((1000 + 10 + 200 + 40 + 50) / 100)


def test_redis_commands_between_two_readings_leave_out_the_meters_own():
    before = command_counts({"cmdstat_get": {"calls": 10}, "cmdstat_info": {"calls": 3}})
    after = command_counts(
        {"cmdstat_get": {"calls": 15}, "cmdstat_info": {"calls": 5}, "cmdstat_evalsha": {"calls": 7}}
        | {"cmdstat_zadd": {"calls": 0}}
    )
    assert command_difference(before, after) == {"evalsha": 7, "get": 5}
    assert list(command_difference(before, after)) == ["evalsha", "get"]  # busiest first


def test_process_cpu_counts_newcomers_from_zero_and_the_departed_to_their_last_reading():
    readings = {1: 5.0, 2: 1.0}
    tracker = ProcessCpu(read=lambda pid: readings.get(pid, 0.0))
    tracker.sample([1, 2])  # the window opens: both already ran before it
    readings.update({1: 6.0, 2: 1.5, 3: 0.25})
    tracker.sample([1, 2, 3])  # 3 started inside the window
    del readings[2]  # 2 exits; a late listing still names it
    readings.update({1: 7.0, 3: 0.5})
    tracker.sample([1, 2, 3])
    assert tracker.seconds == pytest.approx((7.0 - 5.0) + (1.5 - 1.0) + 0.5)


def _reading(seconds: float, cpu: dict[str, float], commands: dict[str, int] | None) -> Reading:
    return Reading(
        seconds=seconds,
        cpu=cpu,
        machine_busy=2 * seconds,
        wal_bytes=0,
        database_wal=DatabaseWal(bytes=4000, full_page_bytes=0, commits=4),
        redis_commands=commands,
    )


def test_what_work_costs_is_the_reading_less_the_idle_rate():
    idle = _reading(5.0, {"api": 0.05, "run_scheduler": 0.1}, {"smembers": 100})
    work = _reading(10.0, {"api": 1.1, "run_scheduler": 0.15, "workers": 0.4}, {"smembers": 150, "zrem": 30})
    net = work.beyond(idle)
    assert net.cpu == pytest.approx({"api": 1.0, "run_scheduler": 0.0, "workers": 0.4})
    assert net.redis_commands == {"zrem": 30}
    assert net.database_wal == work.database_wal  # idle loops write no task WAL
    assert work.ours == pytest.approx(1.65) and work.others == pytest.approx(20.0 - 1.65)


def test_per_task_costs_gather_the_loops_and_leave_unmeasured_groups_out():
    reading = _reading(2.0, {"api": 0.4, "run_dispatcher": 0.01, "run_scheduler": 0.03}, None)
    per_task = costs.per_task(reading, 1000)
    assert per_task["api"] == pytest.approx(400.0)
    assert per_task["loops"] == pytest.approx(40.0)
    assert per_task["redis"] is None and per_task["redis commands"] is None
    assert (per_task["wal bytes"], per_task["commits"]) == (4.0, 0.004)


def test_cap_is_selectable_small_in_quick_mode_and_redis_is_shared_unless_asked():
    full = config.from_env({})
    quick = config.from_env({"BENCH_QUICK": "1", "BENCH_ONLY": "cap", "BENCH_DEDICATED_REDIS": "1"})
    assert quick.wants("CAP") and not quick.wants("W3")
    assert quick.cap_tasks < full.cap_tasks and quick.cap_single_tasks < full.cap_single_tasks
    assert not full.dedicated_redis and quick.dedicated_redis
    argv = dedicated_redis_argv(6399, Path("/tmp"))
    assert argv[argv.index("--maxmemory-policy") + 1] == "noeviction"
    assert argv[argv.index("--save") + 1] == "" and argv[argv.index("--bind") + 1] == "127.0.0.1"
