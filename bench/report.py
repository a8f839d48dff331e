"""The printed table and the results JSON (machine, commit, settings, every figure)."""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench import wakeups
from bench.context import Context
from bench.figures import Figure
from bench.procs import ROOT


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "harness_python": platform.python_version(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    info.update(wakeups.idle_policy())  # what a wake-up from idle costs depends on it (W4)
    return info


def git() -> dict[str, Any]:
    def out(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {"commit": out("rev-parse", "HEAD"), "dirty": bool(out("status", "--porcelain", "--untracked-files=no"))}


def taskforge_versions(python: str) -> dict[str, Any]:
    script = (
        "import importlib.metadata as m, json, platform\n"
        "names = ['Django', 'djangorestframework', 'gunicorn', 'uvicorn', 'uvicorn-worker', 'psycopg', 'uvloop',"
        " 'httptools', 'orjson']\n"
        "v = {}\n"
        "for n in names:\n"
        "    try: v[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: v[n] = None\n"
        "v['python'] = platform.python_version()\n"
        "print(json.dumps(v))\n"
    )
    done = subprocess.run([python, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False)
    try:
        return json.loads(done.stdout)
    except ValueError:
        return {"error": done.stderr[-500:]}


def services(ctx: Context) -> dict[str, Any]:
    info: dict[str, Any] = {}
    try:
        with psycopg.connect(ctx.stack.database_url, autocommit=True) as pg:
            info["postgres"] = pg.execute("SHOW server_version").fetchone()[0]
            for name in ("shared_buffers", "synchronous_commit", "fsync", "max_connections", "work_mem"):
                info[f"postgres_{name}"] = pg.execute(f"SHOW {name}").fetchone()[0]
    except psycopg.Error as exc:
        info["postgres_error"] = str(exc)
    try:
        server = redis.Redis.from_url(ctx.stack.redis_url).info("server")
        info["redis"] = server.get("redis_version")
    except redis.RedisError as exc:
        info["redis_error"] = str(exc)
    return info


def _fmt(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def table(figures: list[Figure]) -> str:
    """The figures as a Markdown table; figures not measured say so, with their reasons below it."""
    header = ("Workload", "Figure", "Median", "Min", "Max", "Unit", "Target", "Met")
    rows = [header]
    reasons: dict[str, int] = {}  # one footnote per distinct reason
    for f in figures:
        met = f.met()
        if f.values:
            median, low, high = (_fmt(v, f.unit) for v in (f.median, min(f.values), max(f.values)))
        else:
            number = reasons.setdefault(f.not_measured, len(reasons) + 1)
            median, low, high = f"not measured [{number}]", "-", "-"
        rows.append(
            (f.workload, f.name, median, low, high, f.unit, f.target_text(), {True: "yes", False: "NO", None: ""}[met])
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [str(c).rjust(widths[i]) if 2 <= i <= 4 else str(c).ljust(widths[i]) for i, c in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines.extend(f"[{number}] {reason}" for reason, number in reasons.items())
    return "\n".join(lines)


def peer_versions() -> dict[str, str | None]:
    """The peers' versions in the harness's own virtualenv (None: not installed, not measured)."""
    versions: dict[str, str | None] = {}
    for name in ("celery", "huey", "pgqueuer", "redis", "psycopg"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def write(ctx: Context, path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
