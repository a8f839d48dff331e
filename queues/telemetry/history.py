"""A queue's history: per-step figures from the per-minute samples of its counters (``tf_queue_sample``).

Between two consecutive samples of a queue, each counter grew by the tasks
of that interval; a counter that shrank was reset (a Redis flush), and then
its later value is what the interval counted, as Prometheus' ``increase()``
reads a reset. Intervals are summed into steps by the minute they start in.
Percentiles come from the summed histogram buckets, interpolated within a
bucket as Prometheus' ``histogram_quantile`` does. A step no pair of samples
covers (no sampler ran) has no figures (``None``), which charts draw as a gap.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models.expressions import RawSQL

from queues.models import QueueSample
from queues.telemetry.counters import BUCKETS

COUNTS = ("enqueued", "done", "failed", "dead", "expired", "cancelled")
MAX_POINTS = 1440


@dataclass
class Step:
    """What happened in one step: counts, and the non-cumulative bucket counts of both histograms."""

    at: datetime
    covered: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    runs: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    waits: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))

    def point(self) -> dict[str, Any]:
        if not self.covered:
            return {"at": self.at, **dict.fromkeys(POINT_FIELDS)}
        return {
            "at": self.at,
            "enqueued": self.counts["enqueued"],
            "completed": self.counts["done"],
            "failed": self.counts["failed"],
            "dead": self.counts["dead"],
            "expired": self.counts["expired"],
            "wait_p50_ms": _ms(quantile(self.waits, 0.5)),
            "wait_p95_ms": _ms(quantile(self.waits, 0.95)),
            "run_p50_ms": _ms(quantile(self.runs, 0.5)),
            "run_p95_ms": _ms(quantile(self.runs, 0.95)),
        }


POINT_FIELDS = (
    "enqueued", "completed", "failed", "dead", "expired", "wait_p50_ms", "wait_p95_ms", "run_p50_ms", "run_p95_ms",
)  # fmt: skip


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def quantile(per_bucket: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile of observations counted per bucket of ``BUCKETS`` (not cumulative); None if none."""
    total = sum(per_bucket)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    lower = 0.0
    for upper, count in zip(BUCKETS, per_bucket, strict=True):
        if count and seen + count >= rank:
            if math.isinf(upper):
                return lower  # beyond the last finite bound: that bound is all that is known
            return lower + (upper - lower) * (rank - seen) / count
        seen += count
        if not math.isinf(upper):
            lower = upper
    return lower


def _increase(before: Sequence[int], after: Sequence[int]) -> list[int]:
    """What grew between two cumulative readings of counters reset together (one counter, or one histogram's
    buckets); a reset restarts them from zero."""
    if any(b < a for a, b in zip(before, after, strict=True)):
        return list(after)
    return [b - a for a, b in zip(before, after, strict=True)]


def _per_bucket(cumulative: Sequence[int]) -> list[int]:
    return [value - (cumulative[i - 1] if i else 0) for i, value in enumerate(cumulative)]


def steps(samples: Sequence[QueueSample], since: datetime, until: datetime, step: timedelta) -> list[Step]:
    """The steps from ``since`` to ``until``, each with what the sample pairs starting in it counted."""
    count = max(1, math.ceil((until - since) / step))
    out = [Step(at=since + i * step) for i in range(count)]
    for before, after in itertools.pairwise(samples):
        if before.minute < since or before.minute >= until:
            continue
        target = out[int((before.minute - since) / step)]
        target.covered = True
        for name in COUNTS:  # each counter on its own, as Prometheus reads each series
            target.counts[name] += _increase([getattr(before, name)], [getattr(after, name)])[0]
        for mine, theirs in ((target.runs, (before.run_buckets, after.run_buckets)),
                             (target.waits, (before.wait_buckets, after.wait_buckets))):  # fmt: skip
            # A sample from before a change of BUCKETS cannot be compared bucket by bucket: skip its histograms.
            if len(theirs[0]) == len(theirs[1]) == len(BUCKETS):
                for i, amount in enumerate(_per_bucket(_increase(*theirs))):
                    mine[i] += amount
    return out


def history_of_every_queue(since: datetime, until: datetime, step: timedelta) -> dict[str, list[dict[str, Any]]]:
    """Every queue's points, from the samples on step boundaries only (a week by the hour reads 168 rows per
    queue, not 10,080): each pair of them spans one step, so the figures are the same while no sample is missing."""
    seconds = int(step.total_seconds())
    rows = (
        QueueSample.objects.filter(minute__gte=since, minute__lte=until + step)
        .annotate(past_boundary=RawSQL("extract(epoch FROM minute)::bigint %% %s", [seconds]))
        .filter(past_boundary=0)
        .order_by("queue_name", "minute")
    )
    by_queue: dict[str, list[QueueSample]] = {}
    for row in rows:
        by_queue.setdefault(row.queue_name, []).append(row)
    return {queue: [s.point() for s in steps(samples, since, until, step)] for queue, samples in by_queue.items()}


def history(queue_name: str, since: datetime, until: datetime, step: timedelta) -> list[dict[str, Any]]:
    """One point per step of ``queue_name``'s history from ``since`` to ``until`` (the API's and the charts')."""
    samples = list(
        QueueSample.objects.filter(queue_name=queue_name, minute__gte=since, minute__lte=until + step).order_by(
            "minute"
        )
    )
    return [s.point() for s in steps(samples, since, until, step)]
