"""The capacity page's tables, written from the newest run that measured CAP.

``python -m bench.capacity`` (``bench.capacity.main``) writes them into
``docs/capacity/*.md``, which ``docs/capacity.md`` includes; ``--check`` exits 1
when they are not what that run gives. The arithmetic is ``bench.capacity``'s;
this module only lays it out.

Standard library only: it runs from ``.venv`` or ``.venv-bench`` alike.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from bench.capacity import (
    LANE_CAPACITY,
    PAGES,
    PRIMARY_CORES,
    QUEUES,
    RETENTION_DAYS,
    ROOT,
    SECONDS_PER_DAY,
    STEADY_RATE,
    UnitCosts,
    burst,
    command,
    cores_for,
    medians,
    newest_capacity_run,
    primary_limit,
    spread,
    steady,
    unit_costs,
)


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
