"""One producer, one task per call, back to back: W0's enqueue rate and W8's trickle.

``run`` times any enqueue call (Celery's ``apply_async``, Huey's task call,
PgQueuer's ``enqueue``). ``python -m bench.sequential --queue Q --seconds S``
does the same through TaskForge's own Python client; it runs with the
project's interpreter (the client's home), prints one JSON line, and needs
``TASKFORGE_API_URL`` and ``TASKFORGE_API_KEY``. This module imports only the
standard library at the top, so both virtualenvs can load it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

WARMUP_SECONDS = 1.0


@dataclass
class Window:
    """What one sequential producer did in its measured window (warm-up calls excluded)."""

    calls: int = 0
    started: float = 0.0  # wall clock (time.time()): compared with Postgres and the peers' counters
    ended: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    total_calls: int = 0  # warm-up included: what the workers have to drain
    results: list[Any] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    @property
    def rate(self) -> float:
        return self.calls / self.seconds if self.seconds > 0 else 0.0


def run(
    call: Callable[[], Any],
    seconds: float,
    *,
    warmup: float = WARMUP_SECONDS,
    on_window_start: Callable[[], None] | None = None,
    keep_results: bool = False,
) -> Window:
    """Call ``call`` back to back for ``warmup`` + ``seconds``; time the calls of the window.

    ``on_window_start`` runs once, between the warm-up and the window (a peer
    reads its done-counter there). A call that raises ends the run: a
    producer's error is a failed workload, not a slow call.
    """
    window = Window()
    begun = time.perf_counter()
    window_start = begun + warmup
    window_end = window_start + seconds
    in_window = False
    while True:
        sent = time.perf_counter()
        if sent >= window_end:
            break
        if not in_window and sent >= window_start:
            in_window = True
            if on_window_start is not None:
                on_window_start()
            window.started = time.time()
            sent = time.perf_counter()
        result = call()
        window.total_calls += 1
        if keep_results:
            window.results.append(result)
        if in_window:
            window.latencies_ms.append((time.perf_counter() - sent) * 1000)
    window.ended = time.time()
    window.calls = len(window.latencies_ms)
    return window


def _client_class() -> Any:
    """TaskForge's Python client, wherever this checkout keeps it."""
    try:
        from taskforge_client import TaskForgeClient
    except ImportError:
        from workers.client import TaskForgeClient
    return TaskForgeClient


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--warmup", type=float, default=WARMUP_SECONDS)
    args = parser.parse_args(argv)
    client = _client_class()(os.environ["TASKFORGE_API_URL"], os.environ["TASKFORGE_API_KEY"])
    payload = {"bench": "sequential"}
    try:
        window = run(
            lambda: client.enqueue(args.queue, payload)["id"], args.seconds, warmup=args.warmup, keep_results=True
        )
    finally:
        client.close()
    summary = asdict(window)
    summary["ids"] = summary.pop("results")
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")
    return 0


def from_json(line: str) -> tuple[Window, list[str]]:
    """The ``Window`` and the task ids printed by ``main``."""
    data = json.loads(line)
    ids = data.pop("ids")
    return Window(**data), ids


if __name__ == "__main__":
    sys.exit(main())
