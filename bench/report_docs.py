"""Write the documentation's "latest results" page from the newest full benchmark run.

``python -m bench.report_docs`` reads the newest complete, full run in
``bench/results/`` (every workload, ``BENCH_RUNS`` runs: no ``BENCH_ONLY``, no
``BENCH_QUICK``) and writes ``docs/performance/latest.md``, which
``docs/performance.md`` includes. Figures are never copied into the docs by
hand, so the page cannot drift from the JSON it names; ``--check`` exits 1
when the page is not what the newest run gives (the docs test does the same).

Standard library only: it runs from ``.venv`` or ``.venv-bench`` alike.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "performance" / "latest.md"


def is_full_run(run: dict[str, Any]) -> bool:
    """A run that measured every workload the usual number of times, to the end."""
    bench = run.get("settings", {}).get("bench", {})
    return bool(run.get("complete")) and not bench.get("quick") and not bench.get("only") and bool(run.get("figures"))


def newest_run(
    accept: Callable[[dict[str, Any]], bool], results: Path, missing: str, remedy: str
) -> tuple[Path, dict[str, Any]]:
    """The newest results file whose run ``accept`` takes; none stops the program with ``missing``."""
    # File names are UTC timestamps (20261129T131628Z.json): name order is time order.
    for path in sorted(results.glob("*.json"), reverse=True):
        run = json.loads(path.read_text())
        if accept(run):
            return path, run
    raise SystemExit(f"{missing} in {results}: run `{remedy}`")


def newest_full_run(results: Path = RESULTS) -> tuple[Path, dict[str, Any]]:
    return newest_run(is_full_run, results, "no complete full benchmark run", "make bench")


def _number(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def _figure_row(figure: dict[str, Any]) -> str:
    unit = figure["unit"]
    name = figure["figure"] if unit in ("x", "tasks/s") else f"{figure['figure']} ({unit})"
    met = {True: "yes", False: "**no**", None: ""}[figure.get("met")]
    cells = [
        figure["workload"],
        name,
        _number(figure.get("median"), unit),
        _number(figure.get("min"), unit),
        _number(figure.get("max"), unit),
        figure.get("target") or "",
        met,
        figure.get("note") or "",
    ]
    return "| " + " | ".join(cells) + " |"


def _machine_line(run: dict[str, Any]) -> str:
    machine = run.get("machine", {})
    services = run.get("settings", {}).get("services", {})
    versions = run.get("settings", {}).get("versions", {})
    parts = [
        f"{machine.get('cpu_count', '?')} vCPU {machine.get('cpu_model', '')}".strip(),
        f"{machine.get('memory_gib', '?')} GiB",
        f"Python {versions.get('python', machine.get('harness_python', '?'))}",
        f"Django {versions.get('Django', '?')}",
    ]
    if "postgres" in services:
        postgres = services["postgres"].split(" ")[0]
        parts.append(
            f"Postgres {postgres} (synchronous_commit={services.get('postgres_synchronous_commit', '?')}, "
            f"shared_buffers {services.get('postgres_shared_buffers', '?')})"
        )
    if "redis" in services:
        parts.append(f"Redis {services['redis']}")
    return ", ".join(parts)


def render(path: Path, run: dict[str, Any]) -> str:
    """The page for one run: where it came from, then every figure."""
    settings = run.get("settings", {})
    bench = settings.get("bench", {})
    taskforge = settings.get("taskforge", {})
    commit = run.get("git", {}).get("commit", "")[:7] or "?"
    dirty = " (with uncommitted changes)" if run.get("git", {}).get("dirty") else ""
    load_start = run.get("load_average_at_start") or [math.nan]
    load_end = run.get("load_average_at_end") or [math.nan]
    lines = [
        "<!-- Written by `python -m bench.report_docs` from the newest full run; do not edit. -->",
        "",
        f"From `bench/results/{path.name}`: a full `make bench` ({bench.get('runs', '?')} runs per workload, "
        f"{run.get('duration_seconds', 0):.0f} s) started {run.get('started_at', '?')[:19].replace('T', ' ')} UTC "
        f"at commit `{commit}`{dirty}.",
        "",
        f"Machine: {_machine_line(run)}; load average {load_start[0]:.1f} at the start, "
        f"{load_end[0]:.1f} at the end. TaskForge served by {taskforge.get('serving', '?')}, "
        f"{taskforge.get('WEB_CONCURRENCY', '?')} processes, psycopg pool of "
        f"{taskforge.get('TASKFORGE_DB_POOL_SIZE', '?')}; drained by the {settings.get('worker', '?')} worker. "
        f"Celery: {settings.get('celery', '?')}.",
        "",
        "| Workload | Figure | Median | Min | Max | Target | Met | Note |",
        "| --- | --- | ---: | ---: | ---: | --- | --- | --- |",
        *(_figure_row(figure) for figure in run["figures"]),
    ]
    failures = run.get("failures") or {}
    if failures:
        lines += ["", "Workloads that failed in this run:", ""]
        lines += [f"* `{name}`: {str(reason).splitlines()[0]}" for name, reason in sorted(failures.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report_docs", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs instead of writing it")
    args = parser.parse_args(argv)
    path, run = newest_full_run()
    page = render(path, run)
    if args.check:
        current = PAGE.read_text() if PAGE.exists() else ""
        if current != page:
            print(f"{PAGE.relative_to(ROOT)} is not from {path.name}: run python -m bench.report_docs", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(page)
    print(f"wrote {PAGE.relative_to(ROOT)} from {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
