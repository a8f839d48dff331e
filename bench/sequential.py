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
#: The client's own cost is measured in alternating rounds of this many calls each way.
OVERHEAD_ROUNDS = 5
OVERHEAD_CALLS = 300


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


def client_overhead(client_call: Callable[[], Any], bare_call: Callable[[], Any], calls: int, rounds: int) -> dict:
    """This process' CPU per call through the client and through a bare httpx request, in alternating rounds.

    Both make the same request to the same server, so what differs is the
    client's own work (building the body and URL, checking the answer,
    decoding it); CPU rather than wall time, which the server's share of
    every call would blur. Returns the medians in ms and the ids enqueued.
    """
    ids: list[str] = []
    per_call: dict[str, list[float]] = {"client": [], "bare": []}
    for _ in range(rounds):
        for name, call in (("client", client_call), ("bare", bare_call)):
            started = time.process_time()
            ids.extend(call() for _ in range(calls))
            per_call[name].append((time.process_time() - started) * 1000 / calls)
    client_ms = sorted(per_call["client"])[rounds // 2]
    bare_ms = sorted(per_call["bare"])[rounds // 2]
    return {"client_cpu_ms": client_ms, "bare_cpu_ms": bare_ms, "overhead_ms": client_ms - bare_ms, "ids": ids}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--warmup", type=float, default=WARMUP_SECONDS)
    parser.add_argument("--overhead", action="store_true", help="also measure the client's CPU against bare httpx")
    args = parser.parse_args(argv)
    client = _client_class()(os.environ["TASKFORGE_API_URL"], os.environ["TASKFORGE_API_KEY"])
    payload = {"bench": "sequential"}
    try:
        window = run(
            lambda: client.enqueue(args.queue, payload)["id"], args.seconds, warmup=args.warmup, keep_results=True
        )
        overhead = _measure_overhead(client, args.queue, payload) if args.overhead else None
    finally:
        client.close()
    summary = asdict(window)
    summary["ids"] = summary.pop("results")
    if overhead is not None:
        summary["ids"] += overhead.pop("ids")
        summary["overhead"] = overhead
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")
    return 0


def _measure_overhead(client: Any, queue: str, payload: dict[str, Any]) -> dict:
    import httpx  # the client's own dependency: this runs with the project's interpreter

    bare = httpx.Client(
        base_url=os.environ["TASKFORGE_API_URL"],
        headers={"Authorization": f"Bearer {os.environ['TASKFORGE_API_KEY']}", "Content-Type": "application/json"},
    )
    body = json.dumps({"payload": payload}).encode()
    path = f"/queues/{queue}/tasks"
    try:
        return client_overhead(
            lambda: client.enqueue(queue, payload)["id"],
            lambda: bare.post(path, content=body).json()["id"],
            OVERHEAD_CALLS,
            OVERHEAD_ROUNDS,
        )
    finally:
        bare.close()


def from_json(line: str) -> tuple[Window, list[str], dict | None]:
    """The ``Window``, the task ids and the client overhead (when measured) printed by ``main``."""
    data = json.loads(line)
    ids = data.pop("ids")
    overhead = data.pop("overhead", None)
    return Window(**data), ids, overhead


if __name__ == "__main__":
    sys.exit(main())
