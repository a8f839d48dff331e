"""Sampling profiles (py-spy) of the API worker processes while a workload runs.

Profiles come from an extra, unscored run so the sampler never skews a
figure. Only threads holding the GIL are sampled (``--gil``): that is where
the CPU goes, which is what limits throughput on two cores. The raw stacks
are kept next to the logs; the results JSON holds a summary: where the
samples' leaf frames were (by library), and the functions with the largest
inclusive share.
"""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path
from typing import Any

from bench.context import Context
from bench.procs import Child

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>.*?)(?::\d+)?\)$")

# Leaf-frame buckets, checked in order (first match wins).
CATEGORIES = (
    ("logging", ("/logging/", "pythonjsonlogger", "taskforge/logs")),
    ("psycopg (Postgres driver)", ("/psycopg",)),
    ("redis-py", ("/redis/",)),
    ("DRF", ("/rest_framework/",)),
    ("Django ORM", ("/django/db/",)),
    ("Django (other)", ("/django/",)),
    ("asgiref (sync/async bridge)", ("/asgiref/",)),
    ("uvicorn / h11 (HTTP)", ("/uvicorn", "/h11/", "/httptools")),
    ("asyncio / threads / selectors", ("/asyncio/", "/threading.py", "/concurrent/", "/selectors.py", "/queue.py")),
    ("TaskForge code", ("/queues/", "/workers/", "/taskforge/", "/dashboard/")),
    ("prometheus", ("/prometheus_client/", "/django_prometheus/")),
    ("json (orjson/json)", ("/json/",)),
)


def _category(path: str) -> str:
    for name, needles in CATEGORIES:
        if any(needle in path for needle in needles):
            return name
    return "other (stdlib, interpreter)"


class Profiler:
    def __init__(self, ctx: Context, name: str, seconds: float) -> None:
        self.ctx = ctx
        self.name = name
        self.seconds = seconds
        self.children: list[Child] = []
        self.outputs: list[Path] = []

    def start(self) -> None:
        if self.children:
            return  # already sampling
        py_spy = str(Path(sys.executable).parent / "py-spy")
        for pid in self.ctx.stack.api_worker_pids():
            out = self.ctx.log_dir / f"profile-{self.name}-{pid}.txt"
            argv = [py_spy, "record", "--pid", str(pid), "--rate", "100", "--nonblocking", "--gil",
                    "--format", "raw", "--full-filenames",
                    "--duration", str(max(1, int(self.seconds))), "--output", str(out)]  # fmt: skip
            self.children.append(self.ctx.supervisor.spawn(f"py-spy-{self.name}-{pid}", argv, {}))
            self.outputs.append(out)

    def finish(self) -> dict[str, Any]:
        for child in self.children:
            try:
                child.process.wait(self.seconds + 30)
            except Exception:  # a stuck sampler must not fail the run
                pass
            self.ctx.supervisor.stop(child, grace=5)
        return summarize([p for p in self.outputs if p.exists()])


def summarize(files: list[Path], top: int = 15) -> dict[str, Any]:
    total = 0
    by_category: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    for path in files:
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            total += count
            frames = [_parse(frame) for frame in stack.split(";")]
            frames = [f for f in frames if f is not None]
            if not frames:
                continue
            func, file = frames[-1]
            by_category[_category(file)] += count
            leaf[f"{func} ({_short(file)})"] += count
            for name in {f"{func} ({_short(file)})" for func, file in frames}:
                inclusive[name] += count
    if not total:
        return {"samples": 0}

    def share(counter: collections.Counter[str], n: int) -> list[list[Any]]:
        return [[name, round(100 * count / total, 1)] for name, count in counter.most_common(n)]

    return {
        "samples": total,
        "leaf_by_library_pct": share(by_category, len(by_category)),
        "top_self_pct": share(leaf, top),
        "top_inclusive_pct": share(inclusive, top + 10),
        "raw_files": [p.name for p in files],
    }


def _parse(frame: str) -> tuple[str, str] | None:
    match = _FRAME.match(frame.strip())
    if not match:
        return (frame.strip(), "") if frame.strip() else None
    return match["func"], match["file"]


def _short(path: str) -> str:
    """A path without the machine's prefixes: ``django/db/...``, ``threading.py``, ``queues/lifecycle.py``."""
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1]
    stdlib = re.search(r"/lib/python3\.\d+/(.*)$", path)
    if stdlib:
        return stdlib[1]
    parts = Path(path).parts
    return "/".join(parts[-2:]) if len(parts) >= 2 else path
