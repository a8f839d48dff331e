"""A day of made-up per-minute samples for the history charts' tests (a busy day with a bad hour)."""

from __future__ import annotations

import math
from datetime import timedelta

from queues.models import QueueSample
from queues.telemetry.counters import BUCKETS
from taskforge.infra.clock import database_now


def fill_a_day(queue: str, *, per_minute: int = 300) -> int:
    """Samples for every minute of the last 24 hours; returns how many."""
    now = database_now().replace(second=0, microsecond=0)
    rows = []
    done = failed = enqueued = 0
    runs = [0] * len(BUCKETS)
    waits = [0] * len(BUCKETS)
    for minute in range(24 * 60, -1, -1):
        at = now - timedelta(minutes=minute)
        hour = at.hour + at.minute / 60
        load = int(per_minute * (1.2 + math.sin(hour / 24 * 2 * math.pi)))  # a daily swell
        bad_hour = 3 <= hour < 4  # "did this start at 3 am?"
        enqueued += load
        done += load - (load // 4 if bad_hour else load // 100)
        failed += load // 4 if bad_hour else load // 100
        for i, upper in enumerate(BUCKETS):  # most runs take 50-100 ms, slower in the bad hour
            runs[i] += load if upper >= (1.0 if bad_hour else 0.1) else 0
            waits[i] += load if upper >= 0.01 else 0
        rows.append(
            QueueSample(
                queue_name=queue,
                minute=at,
                taken_at=at,
                enqueued=enqueued,
                done=done,
                failed=failed,
                dead=0,
                expired=0,
                cancelled=0,
                run_buckets=list(runs),
                wait_buckets=list(waits),
            )
        )
    QueueSample.objects.bulk_create(rows)
    return len(rows)
