"""The capacity model: from what one task costs to what a target rate needs.

Everything here is arithmetic on the unit costs that the CAP workload measures
(``bench/costs.py``): CPU per task of each process in µs, WAL bytes, commits
and Redis commands per task, bytes per stored task. ``docs/capacity.md``
explains the model; ``python -m bench.capacity`` writes its tables
(``docs/capacity/*.md``, included by the page) from the newest run in
``bench/results/`` that measured CAP, so no figure is copied by hand;
``--check`` exits 1 when they are not what that run gives.

Standard library only: it runs from ``.venv`` or ``.venv-bench`` alike.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    return bool(run.get("complete")) and "CAP" not in (run.get("failures") or {}) and bool(medians(run))


def newest_capacity_run(results: Path = RESULTS) -> tuple[Path, dict[str, Any]]:
    # File names are UTC timestamps: name order is time order.
    for path in sorted(results.glob("*.json"), reverse=True):
        run = json.loads(path.read_text())
        if has_capacity_figures(run):
            return path, run
    raise SystemExit(f"no benchmark run with CAP in {results}: run BENCH_ONLY=CAP make bench")


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


# --- the page -------------------------------------------------------------------------------------


def _size(value: float) -> str:
    """Bytes in decimal units: 950 B, 12.3 kB, 4.1 MB, 2.7 TB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value:,.0f} B"


def _n(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "not measured"
    if math.isinf(value):
        return "never"
    return f"{value:,.{digits}f}"


def _cores(value: float | None) -> str:
    return "not measured" if value is None else f"{value:,.1f}"


def _duration(seconds: float) -> str:
    if math.isinf(seconds):
        return "never"
    return f"{seconds / 60:,.0f} min" if seconds >= 120 else f"{seconds:,.0f} s"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


STAGE_COLUMNS = ("enqueue", "batch", "saturated", "single", "vacuum", "prune")
PER_TASK_ROWS = (
    ("API CPU per task", "API CPU (µs)"),
    ("Postgres CPU per task", "Postgres CPU (µs)"),
    ("Redis CPU per task", "Redis CPU (µs)"),
    ("loops CPU per task", "loops CPU (µs)"),
    ("worker CPU per task", "worker CPU (µs)"),
    ("load generator CPU per task", "load generator CPU (µs)"),
    ("WAL bytes per task", "WAL (bytes)"),
    ("WAL full-page image bytes per task", "of which full-page images (bytes)"),
    ("Postgres commits per 1,000 tasks", "commits per 1,000 tasks"),
    ("Redis commands per 1,000 tasks", "Redis commands per 1,000 tasks"),
    ("Redis scripts per 1,000 tasks", "of which scripts"),
    ("tasks per claim", "tasks per claim"),
    ("tasks per ack batch", "tasks per ack batch"),
    ("end-to-end tasks/s", "end-to-end tasks/s"),
)
IDLE_ROWS = (
    ("idle: API CPU", "API"),
    ("idle: Postgres CPU", "Postgres"),
    ("idle: Redis CPU", "Redis"),
    ("idle: loops CPU", "loops"),
    ("idle: worker CPU", "2 idle workers"),
)


def source(path: Path, run: dict[str, Any]) -> str:
    """Where the figures come from: the results file, the command, the commit, the machine's load."""
    commit = run.get("git", {}).get("commit", "")[:7] or "?"
    dirty = " (with uncommitted changes)" if run.get("git", {}).get("dirty") else ""
    runs = run.get("settings", {}).get("bench", {}).get("runs", "?")
    load = (run.get("load_average_at_start") or [math.nan])[0], (run.get("load_average_at_end") or [math.nan])[0]
    return (
        f"From `bench/results/{path.name}`: `{command(run)}` ({runs} runs, medians), started "
        f"{run.get('started_at', '?')[:19].replace('T', ' ')} UTC at commit `{commit}`{dirty}; "
        f"load average {load[0]:.1f} at the start, {load[1]:.1f} at the end."
    )


def variation(run: dict[str, Any]) -> str:
    """How far CPU per task moved between the run's repetitions, beside the machine's other load."""
    cpu = spread(run, "check: CPU per task, every process (paced run)")
    others = spread(run, "batch: cores the rest of the machine took")
    if cpu is None or others is None:
        return ""
    return (
        f"Over the {_repetitions(run)} runs, "
        f"the batch stage's CPU per task, every process together, went from {cpu[0]:,.0f} to {cpu[1]:,.0f} µs "
        f"while the rest of the machine took {others[0]:.1f} to {others[1]:.1f} of its cores."
    )


def _repetitions(run: dict[str, Any]) -> int:
    return int(run.get("settings", {}).get("bench", {}).get("runs", 0))


def costs_table(figures: dict[str, float]) -> list[str]:
    rows = [_row("Per task", *STAGE_COLUMNS), _row("---", *("---:" for _ in STAGE_COLUMNS))]
    for figure, label in PER_TASK_ROWS:
        cells = [_figure(figures.get(f"{stage}: {figure}")) for stage in STAGE_COLUMNS]
        if any(cell != "-" for cell in cells):
            rows.append(_row(label, *cells))
    idle = [f"{label} {_figure(figures.get(name))}" for name, label in IDLE_ROWS if name in figures]
    lane_ids = _figure(figures.get("Redis lane entries (of the backlog)"))
    rows += [
        "",
        f"Idle (CPU ms per second, subtracted from every stage above): {', '.join(idle)}; "
        f"Redis {_figure(figures.get('idle: Redis commands/s'))} commands/s.",
        "",
        "| Stored | Bytes |",
        "| --- | ---: |",
        _row("Postgres, per pending task", _figure(figures.get("Postgres bytes per pending task"))),
        _row("Postgres, per done task, before vacuum", _figure(figures.get("Postgres bytes per done task"))),
        _row("Postgres, per done task, compacted", _figure(figures.get("Postgres bytes per done task, compacted"))),
        _row("Redis, per lane entry", _figure(figures.get("Redis bytes per lane entry"))),
        _row(
            f"Redis, every key of the bench DB (one queue, {lane_ids} ids in its lane)",
            _figure(figures.get("Redis bytes, all keys of the bench DB")),
        ),
    ]
    return rows


def steady_table(costs: UnitCosts, rate: float = STEADY_RATE) -> list[str]:
    s = steady(costs, rate)
    retained = rate * SECONDS_PER_DAY * RETENTION_DAYS
    return [
        "| What | Needs |",
        "| --- | ---: |",
        _row("API cores", _cores(s.api_cores)),
        _row("Postgres cores (lifecycle, vacuum, prune)", _cores(s.postgres_cores)),
        _row("Redis cores", _cores(s.redis_cores)),
        _row("loop cores (all loops together)", _cores(s.loop_cores)),
        _row("worker cores (the worker's own share; handlers not included)", _cores(s.worker_cores)),
        _row("Postgres commits/s", _n(s.commits_per_second)),
        _row("WAL", f"{_size(s.wal_bytes_per_second)}/s, {_size(s.wal_bytes_per_day)}/day"),
        _row("Redis commands/s", _n(s.redis_commands_per_second)),
        _row(f"tasks retained ({RETENTION_DAYS} days)", _n(retained)),
        _row("Postgres disk for them", f"{_size(s.disk_bytes[0])} to {_size(s.disk_bytes[1])}"),
        _row(f"Redis memory ({QUEUES} queues, lanes full)", _size(QUEUES * LANE_CAPACITY * costs.lane_entry_bytes)),
        _row(
            "single-call form instead: API, Postgres cores",
            f"{_cores(cores_for(rate, costs.single_api))}, {_cores(cores_for(rate, costs.single_postgres))}",
        ),
    ]


def burst_table(costs: UnitCosts) -> list[str]:
    b = burst(costs)
    return [
        "| What | Needs |",
        "| --- | ---: |",
        _row("API cores while it lasts", _cores(b.api_cores)),
        _row("Postgres cores while it lasts", _cores(b.postgres_cores)),
        _row("WAL while it lasts", f"{_size(b.wal_bytes_per_second)}/s"),
        _row("backlog when it ends", f"{_n(b.backlog)} tasks"),
        _row("Postgres disk for the backlog", _size(b.backlog_bytes)),
        _row("Redis memory for the backlog (per queue, whatever its length)", _size(b.lane_bytes)),
        _row("time to work it off afterwards", _duration(b.drain_seconds)),
    ]


def primary_table(costs: UnitCosts) -> list[str]:
    rows = [
        f"| Primary | Tasks/s | WAL | Commits/s | Disk at {RETENTION_DAYS} days |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for limit in (primary_limit(costs, cores) for cores in PRIMARY_CORES):
        rows.append(
            _row(
                f"{limit.cores} cores",
                _n(limit.rate),
                f"{_size(limit.wal_bytes_per_second)}/s",
                _n(limit.commits_per_second),
                _size(limit.disk_bytes),
            )
        )
    return rows


def runs_of(run: dict[str, Any], name: str) -> list[float]:
    """Every repetition's value of one CAP figure, in the order they ran."""
    for f in run.get("figures", []):
        if f.get("workload") == "CAP" and f.get("figure") == name:
            return [float(v) for v in f.get("runs") or [] if v is not None]
    return []


def per_run(run: dict[str, Any]) -> str:
    """The check's ratio in each repetition, with how busy the machine was and what the rest of it took."""
    rows = zip(
        runs_of(run, "check: measured / predicted"),
        runs_of(run, "saturated: busy cores, whole machine"),
        runs_of(run, "saturated: cores the rest of the machine took"),
        strict=False,
    )
    cells = [f"{ratio:.2f} ({busy:.2f} cores busy, {others:.2f} taken by the rest)" for ratio, busy, others in rows]
    return f"Measured / predicted in each run: {'; '.join(cells)}." if cells else ""


def check_table(figures: dict[str, float]) -> list[str]:
    def get(name: str, digits: int = 0) -> str:
        return _n(figures.get(name), digits)

    return [
        "| | Figure |",
        "| --- | ---: |",
        _row(
            "CPU per task, every process on the machine, paced run (µs)",
            get("check: CPU per task, every process (paced run)", 1),
        ),
        _row("cores the stack spends idle", get("check: cores the stack spends idle", 2)),
        _row(
            "cores the rest of the machine took during the saturated run",
            get("saturated: cores the rest of the machine took", 2),
        ),
        _row("predicted tasks/s, all cores", get("check: predicted tasks/s on all cores")),
        _row("**predicted** tasks/s, the cores left", get("check: predicted tasks/s on the cores left")),
        _row("**measured** tasks/s, saturated run", get("check: measured tasks/s (saturated)")),
        _row("measured / predicted", get("check: measured / predicted", 2)),
        _row("busy cores, whole machine, saturated run", get("saturated: busy cores, whole machine", 2)),
    ]


def render(path: Path, run: dict[str, Any]) -> dict[str, str]:
    """The generated fragments of docs/capacity.md, by file name."""
    figures = medians(run)
    costs = unit_costs(figures)
    header = "<!-- Written by `python -m bench.capacity` from the newest run with CAP; do not edit. -->"
    fragments = {
        "costs.md": [source(path, run), "", *costs_table(figures), "", variation(run)],
        "steady.md": steady_table(costs),
        "burst.md": burst_table(costs),
        "primary.md": primary_table(costs),
        "check.md": [*check_table(figures), "", per_run(run)],
    }
    return {name: "\n".join([header, "", *lines]) + "\n" for name, lines in fragments.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the pages differ instead of writing them")
    args = parser.parse_args(argv)
    path, run = newest_capacity_run()
    pages = render(path, run)
    if args.check:
        stale = [
            name for name, text in pages.items() if not (PAGES / name).exists() or (PAGES / name).read_text() != text
        ]
        if stale:
            where = PAGES.relative_to(ROOT)
            print(f"{where}/{', '.join(stale)} not from {path.name}: run python -m bench.capacity", file=sys.stderr)
            return 1
        return 0
    PAGES.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (PAGES / name).write_text(text)
    print(f"wrote {PAGES.relative_to(ROOT)}/{{{','.join(pages)}}} from {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
