"""The capacity model: from what one task costs to what a target rate needs.

Everything here is arithmetic on the unit costs that the CAP workload measures
(``bench/costs.py``): CPU per task of each process in µs, WAL bytes, commits
and Redis commands per task, bytes per stored task. ``docs/capacity.md``
explains the model; ``python -m bench.capacity`` writes its tables
(``docs/capacity/*.md``, included by the page, laid out by
``bench.capacity_page``) from the newest run in ``bench/results/`` that
measured CAP, so no figure is copied by hand; ``--check`` exits 1 when they
are not what that run gives.

Standard library only: it runs from ``.venv`` or ``.venv-bench`` alike.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.report_docs import newest_run

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGES = ROOT / "docs" / "capacity"

# The model's inputs that are choices, not measurements (docs/capacity.md says why).
UTILIZATION = 0.7  # of every core: headroom for spikes, failover and noisy neighbours
RETENTION_DAYS = 7  # TASKFORGE_RETENTION_DAYS' default
STEADY_RATE = 5_000.0
BURST_RATE = 50_000.0
BURST_SECONDS = 60.0
PRIMARY_CORES = (16, 32, 64, 128)
QUEUES = 100  # for Redis: every queue has a lane, however long its backlog
#: Ids kept per queue's lane (``queues.dispatch.lanes.LANE_CAPACITY``; a test keeps them equal).
LANE_CAPACITY = 500
SECONDS_PER_DAY = 86_400

# The CPU groups a task needs on a machine that runs everything (bench/costs.py's names).
MACHINE_GROUPS = ("api", "postgres", "redis", "loops", "workers", "load generator")


def machine_cpu_per_task(costs: dict[str, float | None]) -> float:
    """µs of CPU per task across every process on one machine (groups not measured count 0)."""
    return sum(costs.get(group) or 0.0 for group in MACHINE_GROUPS)


def throughput(cores: float, cpu_us_per_task: float) -> float:
    """Tasks/s that ``cores`` fully busy sustain when each task costs ``cpu_us_per_task``."""
    return max(0.0, cores) * 1e6 / cpu_us_per_task


def cores_for(rate: float, cpu_us_per_task: float, utilization: float = UTILIZATION) -> float:
    """Cores that serve ``rate`` tasks/s at ``utilization``."""
    return rate * cpu_us_per_task / 1e6 / utilization


@dataclass(frozen=True)
class UnitCosts:
    """Per task, from one CAP run (medians over its runs). CPU in µs, sizes in bytes."""

    api: float  # the batch-form lifecycle: enqueue 100 per request, claims of up to 50, batched acks
    postgres: float
    redis: float | None  # None: measured on a shared Redis server, so not at all
    loops: float
    workers: float
    wal: float
    commits: float
    redis_commands: float | None
    api_enqueue: float  # the enqueue alone (what a burst costs before anyone claims)
    postgres_enqueue: float
    redis_enqueue: float | None
    wal_enqueue: float
    commits_enqueue: float
    postgres_vacuum: float  # after the lifecycle, what VACUUM spends on the task's dead row versions
    wal_vacuum: float
    postgres_prune: float  # the watchdog deleting it past retention
    loops_prune: float
    wal_prune: float
    bytes_pending: float  # tf_task + tf_task_event, indexes included
    bytes_done: float  # a done task as the lifecycle leaves it (dead versions not yet vacuumed)
    bytes_done_compact: float
    lane_entry_bytes: float
    single_api: float  # the single-call form: one enqueue, one claim, one ack
    single_postgres: float
    single_wal: float

    @property
    def postgres_steady(self) -> float:
        """Postgres CPU a task costs over its whole life: lifecycle, vacuum, prune."""
        return self.postgres + self.postgres_vacuum + self.postgres_prune

    @property
    def wal_steady(self) -> float:
        return self.wal + self.wal_vacuum + self.wal_prune


@dataclass(frozen=True)
class Sizing:
    """What a steady ``rate`` needs."""

    rate: float
    api_cores: float
    postgres_cores: float
    redis_cores: float | None
    loop_cores: float
    worker_cores: float
    wal_bytes_per_second: float
    commits_per_second: float
    redis_commands_per_second: float | None
    disk_bytes: tuple[float, float]  # retained tasks: compacted .. as the lifecycle leaves them
    wal_bytes_per_day: float


def steady(costs: UnitCosts, rate: float, utilization: float = UTILIZATION, days: int = RETENTION_DAYS) -> Sizing:
    retained = rate * SECONDS_PER_DAY * days
    return Sizing(
        rate=rate,
        api_cores=cores_for(rate, costs.api, utilization),
        postgres_cores=cores_for(rate, costs.postgres_steady, utilization),
        redis_cores=None if costs.redis is None else cores_for(rate, costs.redis, utilization),
        loop_cores=cores_for(rate, costs.loops + costs.loops_prune, utilization),
        worker_cores=cores_for(rate, costs.workers, utilization),
        wal_bytes_per_second=rate * costs.wal_steady,
        commits_per_second=rate * costs.commits,
        redis_commands_per_second=None if costs.redis_commands is None else rate * costs.redis_commands,
        disk_bytes=(retained * costs.bytes_done_compact, retained * costs.bytes_done),
        wal_bytes_per_day=rate * costs.wal_steady * SECONDS_PER_DAY,
    )


@dataclass(frozen=True)
class Burst:
    """A burst of ``rate`` tasks/s for ``seconds`` on top of a deployment sized for ``steady`` (at
    ``utilization``): accepted at once, drained at the deployment's spare capacity."""

    rate: float
    seconds: float
    steady: float
    api_cores: float  # enqueueing the burst while the drain goes on at full capacity
    postgres_cores: float
    wal_bytes_per_second: float
    backlog: float  # tasks waiting when the burst ends
    backlog_bytes: float  # in Postgres
    lane_bytes: float  # in Redis, per queue, whatever the backlog
    drain_seconds: float  # to work the backlog off afterwards


def burst(
    costs: UnitCosts,
    rate: float = BURST_RATE,
    seconds: float = BURST_SECONDS,
    steady_rate: float = STEADY_RATE,
    utilization: float = UTILIZATION,
) -> Burst:
    # Sized for steady_rate at `utilization`, the drain can run at steady_rate / utilization.
    drain = steady_rate / utilization
    backlog = max(0.0, rate - drain) * seconds
    claim_and_ack_api = costs.api - costs.api_enqueue
    claim_and_ack_postgres = costs.postgres - costs.postgres_enqueue
    return Burst(
        rate=rate,
        seconds=seconds,
        steady=steady_rate,
        api_cores=cores_for(rate * costs.api_enqueue + drain * claim_and_ack_api, 1.0, utilization),
        postgres_cores=cores_for(rate * costs.postgres_enqueue + drain * claim_and_ack_postgres, 1.0, utilization),
        wal_bytes_per_second=rate * costs.wal_enqueue + drain * (costs.wal - costs.wal_enqueue),
        backlog=backlog,
        backlog_bytes=backlog * costs.bytes_pending,
        lane_bytes=LANE_CAPACITY * costs.lane_entry_bytes,
        drain_seconds=backlog / (drain - steady_rate) if drain > steady_rate else math.inf,
    )


@dataclass(frozen=True)
class PrimaryLimit:
    """The steady rate at which one Postgres primary of ``cores`` runs at ``utilization``."""

    cores: int
    rate: float
    wal_bytes_per_second: float
    commits_per_second: float
    disk_bytes: float  # retained at that rate, as the lifecycle leaves them


def primary_limit(costs: UnitCosts, cores: int, utilization: float = UTILIZATION) -> PrimaryLimit:
    rate = throughput(cores * utilization, costs.postgres_steady)
    return PrimaryLimit(
        cores=cores,
        rate=rate,
        wal_bytes_per_second=rate * costs.wal_steady,
        commits_per_second=rate * costs.commits,
        disk_bytes=rate * SECONDS_PER_DAY * RETENTION_DAYS * costs.bytes_done,
    )


# --- from a results file ------------------------------------------------------------------------


def medians(run: dict[str, Any]) -> dict[str, float]:
    """CAP's figures of one run: name -> median (figures not measured are left out)."""
    return {
        f["figure"]: float(f["median"])
        for f in run.get("figures", [])
        if f.get("workload") == "CAP" and f.get("median") is not None
    }


def spread(run: dict[str, Any], name: str) -> tuple[float, float] | None:
    """The lowest and highest value one CAP figure took over the run's repetitions."""
    for f in run.get("figures", []):
        if f.get("workload") == "CAP" and f.get("figure") == name and f.get("min") is not None:
            return float(f["min"]), float(f["max"])
    return None


def unit_costs(figures: dict[str, float]) -> UnitCosts:
    def get(name: str) -> float:
        return figures[name]

    def maybe(name: str) -> float | None:
        return figures.get(name)

    per_thousand = 1000.0
    commands = maybe("batch: Redis commands per 1,000 tasks")
    return UnitCosts(
        api=get("batch: API CPU per task"),
        postgres=get("batch: Postgres CPU per task"),
        redis=maybe("batch: Redis CPU per task"),
        loops=get("batch: loops CPU per task"),
        workers=get("batch: worker CPU per task"),
        wal=get("batch: WAL bytes per task"),
        commits=get("batch: Postgres commits per 1,000 tasks") / per_thousand,
        redis_commands=None if commands is None else commands / per_thousand,
        api_enqueue=get("enqueue: API CPU per task"),
        postgres_enqueue=get("enqueue: Postgres CPU per task"),
        redis_enqueue=maybe("enqueue: Redis CPU per task"),
        wal_enqueue=get("enqueue: WAL bytes per task"),
        commits_enqueue=get("enqueue: Postgres commits per 1,000 tasks") / per_thousand,
        postgres_vacuum=get("vacuum: Postgres CPU per task"),
        wal_vacuum=get("vacuum: WAL bytes per task"),
        postgres_prune=get("prune: Postgres CPU per task"),
        loops_prune=get("prune: loops CPU per task"),
        wal_prune=get("prune: WAL bytes per task"),
        bytes_pending=get("Postgres bytes per pending task"),
        bytes_done=get("Postgres bytes per done task"),
        bytes_done_compact=get("Postgres bytes per done task, compacted"),
        lane_entry_bytes=get("Redis bytes per lane entry"),
        single_api=get("single: API CPU per task"),
        single_postgres=get("single: Postgres CPU per task"),
        single_wal=get("single: WAL bytes per task"),
    )


def has_capacity_figures(run: dict[str, Any]) -> bool:
    """A finished CAP on a Redis of the harness's own: only there are Redis CPU and commands metered."""
    return (
        bool(run.get("complete"))
        and bool(run.get("settings", {}).get("bench", {}).get("dedicated_redis"))
        and "CAP" not in (run.get("failures") or {})
        and bool(medians(run))
    )


def newest_capacity_run(results: Path = RESULTS) -> tuple[Path, dict[str, Any]]:
    return newest_run(
        has_capacity_figures,
        results,
        "no benchmark run with CAP and a dedicated Redis",
        "BENCH_ONLY=CAP BENCH_PEERS=0 BENCH_DEDICATED_REDIS=1 make bench",
    )


def command(run: dict[str, Any]) -> str:
    """The command line that made a run, from its settings."""
    bench = run.get("settings", {}).get("bench", {})
    words = []
    if bench.get("only"):
        words.append(f"BENCH_ONLY={','.join(bench['only'])}")
    if bench.get("quick"):
        words.append("BENCH_QUICK=1")
    elif bench.get("runs", 3) != 3:
        words.append(f"BENCH_RUNS={bench['runs']}")
    if bench.get("peers") is False:
        words.append("BENCH_PEERS=0")
    if bench.get("dedicated_redis"):
        words.append("BENCH_DEDICATED_REDIS=1")
    return " ".join([*words, "make bench"])


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.capacity``: write (or ``--check``) the page's tables (``bench.capacity_page``)."""
    from bench import capacity_page  # it lays out what this module computes

    return capacity_page.main(argv)


if __name__ == "__main__":
    sys.exit(main())
