"""Push deliveries on /metrics: counts by outcome and a latency histogram, kept in Redis.

The pushers are separate processes (containers), so, as for the task counters
(``queues.telemetry.counters``, whose best-effort writer this reuses), the totals live in
Redis hashes that any API process reads at scrape time:

* ``tf:{metrics}:push_deliveries``  field ``queue|outcome``  -> deliveries
* ``tf:{metrics}:push_latency``     field ``queue|le``       -> observations in that bucket only
                                    field ``queue|sum``      -> sum of observed seconds

``outcome`` is ``2xx``, ``3xx``, ``4xx``, ``5xx``, ``timeout``, ``connection_error`` or
``refused``. Deliveries in flight are read from the semaphores (``queues.push.semaphore``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from queues.telemetry import counters
from taskforge.infra.redis import redis_client

DELIVERIES_KEY = "tf:{metrics}:push_deliveries"
LATENCY_KEY = "tf:{metrics}:push_latency"
OUTCOMES = ("2xx", "3xx", "4xx", "5xx", "timeout", "connection_error", "refused")
# From a receiver that answers at once to one that uses the 30-minute deadline.
BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, math.inf,
)  # fmt: skip
BUCKET_LABELS = tuple(counters.bucket_label(b) for b in BUCKETS)


def _bucket_for(seconds: float) -> str:
    for upper, label in zip(BUCKETS, BUCKET_LABELS, strict=True):
        if seconds <= upper:
            return label
    return "+Inf"


def delivered(finished: Iterable[tuple[str, str, float]]) -> None:
    """Count finished deliveries, each ``(queue, outcome, seconds)``, in one write (never raises:
    metrics are best-effort; batched per process like the task counters)."""
    increments: counters.Increments = Counter()
    for queue, outcome, seconds in finished:
        increments[(DELIVERIES_KEY, f"{queue}|{outcome}")] += 1
        increments[(LATENCY_KEY, f"{queue}|{_bucket_for(max(0.0, seconds))}")] += 1
        increments[(LATENCY_KEY, f"{queue}|sum")] += max(0.0, seconds)  # type: ignore[assignment]
    counters.record(increments)


@dataclass
class Snapshot:
    deliveries: dict[tuple[str, str], int] = field(default_factory=dict)
    # queue -> (cumulative count per bucket label, in BUCKETS order; sum of seconds)
    latencies: dict[str, tuple[list[tuple[str, int]], float]] = field(default_factory=dict)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def snapshot() -> Snapshot:
    """The stored totals (raises ``redis.RedisError`` when Redis is unreachable)."""
    pipe = redis_client().pipeline(transaction=False)
    pipe.hgetall(DELIVERIES_KEY)
    pipe.hgetall(LATENCY_KEY)
    deliveries_raw, latency_raw = pipe.execute()
    snap = Snapshot()
    for name, value in deliveries_raw.items():
        queue, _, outcome = _text(name).rpartition("|")
        snap.deliveries[(queue, outcome)] = int(value)
    per_queue: dict[str, dict[str, float]] = {}
    for name, value in latency_raw.items():
        queue, _, part = _text(name).rpartition("|")
        per_queue.setdefault(queue, {})[part] = float(value)
    for queue, parts in per_queue.items():
        running = 0
        cumulative: list[tuple[str, int]] = []
        for label in BUCKET_LABELS:
            running += int(parts.get(label, 0))
            cumulative.append((label, running))
        snap.latencies[queue] = (cumulative, parts.get("sum", 0.0))
    return snap
