"""Task counters and the execution-time histogram, kept in Redis.

Transitions happen in every API process, the scheduler and the watchdog,
possibly in different containers, so no process can hold the totals in its
own memory. Each committed batch of moves becomes one MULTI/EXEC of
``HINCRBY``/``HINCRBYFLOAT`` on three hashes, and ``/metrics`` (any API
process) reads them back at scrape time (``queues.telemetry.collector``):

* ``tf:{metrics}:enqueued``   field ``queue``           -> tasks enqueued
* ``tf:{metrics}:completed``  field ``queue|status``    -> finished attempts and cancels
* ``tf:{metrics}:duration``   field ``queue|le``        -> observations in that bucket only
                              field ``queue|sum``       -> sum of observed seconds
* ``tf:{metrics}:wait``       the same, for enqueue-to-start: from a task's
                              ``scheduled_at`` (its enqueue time when due at once)
                              to its claim, for every claim

With ``TASKFORGE_METRICS_KIND_LABEL`` on, moves of tasks that have a
``kind`` also count in two more hashes, for families with a ``kind`` label
(opt-in: kinds are the producers' strings, so their number is theirs too):

* ``tf:{metrics}:enqueued_by_kind``  field ``queue|kind``
* ``tf:{metrics}:completed_by_kind`` field ``queue|kind|status``

Buckets are stored non-cumulative and summed at read time, so one
observation is one ``HINCRBY`` whatever its value. The keys share the
``{metrics}`` hash tag, so the transaction also runs on Redis Cluster.

Writes are batched per process without delaying an idle one: a move is
written at once unless this process wrote less than a window ago
(``taskforge.infra.write_window.WINDOW_SECONDS``, a tenth of a second);
then it joins the next write, which a background thread sends when the
window ends (the same window as the request metrics'). A busy API process
thus writes about 10 times a second, not once per request (``make bench``
counted one Redis round trip, some 15% of a single enqueue's CPU, in the
per-request write), and an idle one as soon as it moves a task.
``snapshot()`` first writes what this process holds, and a process that
exits normally writes it too.

Metrics are best-effort: Redis trouble never fails a transition. Increments
that could not be written stay in this process (bounded) and go out with the
next write once Redis answers again; a warning is logged at most once a
minute. A Redis restart or flush resets the counters, which Prometheus'
``rate()`` and ``increase()`` treat like any counter reset.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
from django.conf import settings

from taskforge.infra.redis import redis_client
from taskforge.infra.write_window import WINDOW_SECONDS, WriteWindow

logger = logging.getLogger("taskforge.metrics")

ENQUEUED_KEY = "tf:{metrics}:enqueued"
COMPLETED_KEY = "tf:{metrics}:completed"
ENQUEUED_BY_KIND_KEY = "tf:{metrics}:enqueued_by_kind"
COMPLETED_BY_KIND_KEY = "tf:{metrics}:completed_by_kind"
DURATION_KEY = "tf:{metrics}:duration"
WAIT_KEY = "tf:{metrics}:wait"

# Claim to ack/nack/expiry, in seconds: from fast handlers to hour-long jobs.
BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, math.inf,
)  # fmt: skip
COMPLETION_STATUSES = ("done", "failed", "dead", "expired", "cancelled")

# After a failed write, skip Redis for this long: a hung Redis (connect
# timeout) must not slow every transition down.
RETRY_AFTER_SECONDS = 5.0
WARN_EVERY_SECONDS = 60.0
# Distinct (key, field) pairs kept while Redis is away; beyond that, increments are dropped.
MAX_PENDING_FIELDS = 10_000


def bucket_label(upper: float) -> str:
    """Prometheus' spelling of a bucket bound (``0.005``, ``1.0``, ``+Inf``)."""
    if math.isinf(upper):
        return "+Inf"
    return repr(float(upper))


BUCKET_LABELS = tuple(bucket_label(b) for b in BUCKETS)


def completion_status(row: dict[str, Any]) -> str | None:
    """The ``status`` label of ``taskforge_tasks_completed_total`` for a move, if any.

    Only finished attempts (ack, nack, lease expiry) and cancels count: a
    lease expiry is ``expired`` whether the task goes on to ``retry`` or
    ``dead``, a nack is ``failed`` when the task will be retried, and a
    released task (handed back by a worker that never started it) is none.
    """
    to_status, from_status = row["status"], row["from_status"]
    if to_status == "cancelled":
        return "cancelled"
    if from_status not in ("claimed", "executing"):
        return None
    if row.get("expired"):
        return "expired"
    if row.get("released"):  # handed back unstarted: no attempt finished
        return None
    return {"done": "done", "dead": "dead", "retry": "failed"}.get(to_status)


def _bucket_for(seconds: float) -> str:
    for upper, label in zip(BUCKETS, BUCKET_LABELS, strict=True):
        if seconds <= upper:
            return label
    return "+Inf"  # NaN


Increments = Counter[tuple[str, str]]


def increments_for(rows: Iterable[dict[str, Any]], queue_name: Callable[[Any], str]) -> Increments:
    """What a batch of committed moves adds to each stored series."""
    out: Increments = Counter()
    by_kind = settings.TASKFORGE_METRICS_KIND_LABEL
    for row in rows:
        queue = queue_name(row["queue_id"])
        kind = row.get("kind") if by_kind else None  # bulk moves (purge) carry no kind
        if row["from_status"] is None:
            out[(ENQUEUED_KEY, queue)] += 1
            if kind:
                out[(ENQUEUED_BY_KIND_KEY, f"{queue}|{kind}")] += 1
            continue
        if row["status"] == "claimed" and row.get("claimed_at") and row.get("scheduled_at"):
            waited = max(0.0, (row["claimed_at"] - row["scheduled_at"]).total_seconds())
            out[(WAIT_KEY, f"{queue}|{_bucket_for(waited)}")] += 1
            out[(WAIT_KEY, f"{queue}|sum")] += waited
            continue
        status = completion_status(row)
        if status is None:
            continue
        out[(COMPLETED_KEY, f"{queue}|{status}")] += 1
        if kind:
            out[(COMPLETED_BY_KIND_KEY, f"{queue}|{kind}|{status}")] += 1
        seconds = row.get("execution_seconds")
        if status != "cancelled" and seconds is not None:
            seconds = max(0.0, float(seconds))
            out[(DURATION_KEY, f"{queue}|{_bucket_for(seconds)}")] += 1
            out[(DURATION_KEY, f"{queue}|sum")] += seconds  # type: ignore[assignment]
    return out


@dataclass
class _Outbox:
    """Increments this process has not yet written to Redis."""

    lock: threading.Lock = field(default_factory=threading.Lock)  # guards the fields below
    writing: threading.Lock = field(default_factory=threading.Lock)  # held for a whole write
    pending: Increments = field(default_factory=Counter)
    retry_at: float = 0.0
    last_warning: float = -math.inf
    failures_since_warning: int = 0
    dropped: int = 0
    # When this process last tried a write, and the thread that writes at the end of a window.
    window: WriteWindow = field(
        default_factory=lambda: WriteWindow(WINDOW_SECONDS, lambda: flush(), thread_name="metrics-writer")
    )

    def add(self, increments: Increments) -> None:
        for series, amount in increments.items():
            if series in self.pending or len(self.pending) < MAX_PENDING_FIELDS:
                self.pending[series] += amount
            else:
                self.dropped += 1


_outbox = _Outbox()


def record_transitions(rows: list[dict[str, Any]], queue_name: Callable[[Any], str]) -> None:
    """Add a committed batch of moves to the shared counters (never raises): written at once, or, if this
    process wrote less than ``WINDOW_SECONDS`` ago, with the next write at the end of the window."""
    record(increments_for(rows, queue_name))


async def record_transitions_on_loop(rows: list[dict[str, Any]], queue_name: Callable[[Any], str]) -> None:
    """:func:`record_transitions` from the event loop: a write due at once runs on a thread, awaited."""
    increments = increments_for(rows, queue_name)
    if increments and not _batched(increments):
        await asyncio.get_running_loop().run_in_executor(None, flush, increments)


def record(increments: Increments) -> None:
    """Add increments to the shared counters (never raises), batched as ``record_transitions`` says."""
    if increments and not _batched(increments):
        flush(increments)


def _batched(increments: Increments) -> bool:
    """Leave ``increments`` to the writer's next write when this process wrote within the window; else False."""
    outbox = _outbox
    with outbox.lock:
        if outbox.window.open():
            outbox.add(increments)
            outbox.window.write_at_end()
            return True
    return False


def forget_pending() -> None:
    """Drop what this process has not written yet, and write the next move at once (tests that flush Redis:
    increments of an earlier test must not land in the next test's counters)."""
    with _outbox.writing, _outbox.lock:  # after any write in flight
        _outbox.pending.clear()
        _outbox.window.forget()
        _outbox.retry_at = 0.0


def flush(increments: Increments | None = None) -> bool:
    """Write ``increments`` and anything left over from earlier failures.

    Returns whether Redis took the write (nothing pending counts as taken).
    One write at a time per process: a flush that finds the batch writer busy
    waits for it, so whoever reads Redis after ``flush()`` sees every move
    this process made.
    """
    outbox = _outbox
    with outbox.writing:
        return _write(outbox, increments)


def _write(outbox: _Outbox, increments: Increments | None) -> bool:
    with outbox.lock:
        if increments:
            outbox.add(increments)
        if not outbox.pending:
            return True
        if time.monotonic() < outbox.retry_at:
            return False
        batch, outbox.pending = outbox.pending, Counter()
        outbox.window.wrote()
    try:
        pipe = redis_client().pipeline(transaction=True)
        for (key, name), amount in sorted(batch.items()):
            if isinstance(amount, float):
                pipe.hincrbyfloat(key, name, amount)
            else:
                pipe.hincrby(key, name, amount)
        pipe.execute()
    except (redis.RedisError, OSError) as exc:
        with outbox.lock:
            outbox.add(batch)
            outbox.retry_at = time.monotonic() + RETRY_AFTER_SECONDS
            outbox.failures_since_warning += 1
            _warn_rate_limited(outbox, exc)
        return False
    return True


def _warn_rate_limited(outbox: _Outbox, exc: Exception) -> None:
    now = time.monotonic()
    if now - outbox.last_warning < WARN_EVERY_SECONDS:
        return
    logger.warning(
        "metrics not written to redis (%s); %d series kept for a later write",
        type(exc).__name__,
        len(outbox.pending),
        extra={
            "event": "metrics.write_failed",
            "error": f"{type(exc).__name__}: {exc}",
            "failures": outbox.failures_since_warning,
            "pending_series": len(outbox.pending),
            "dropped_increments": outbox.dropped,
        },
    )
    outbox.last_warning = now
    outbox.failures_since_warning = 0


# --- reading the totals back (at scrape time) ------------------------------------------


@dataclass
class Snapshot:
    enqueued: dict[str, int] = field(default_factory=dict)
    completed: dict[tuple[str, str], int] = field(default_factory=dict)
    # queue -> (cumulative count per bucket label, in BUCKETS order; sum of seconds)
    durations: dict[str, tuple[list[tuple[str, int]], float]] = field(default_factory=dict)
    enqueued_by_kind: dict[tuple[str, str], int] = field(default_factory=dict)
    completed_by_kind: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # queue -> enqueue-to-start, as ``durations``
    waits: dict[str, tuple[list[tuple[str, int]], float]] = field(default_factory=dict)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def snapshot() -> Snapshot:
    """The stored totals, this process's latest moves included (raises ``redis.RedisError`` when Redis is
    unreachable)."""
    flush()
    pipe = redis_client().pipeline(transaction=False)
    pipe.hgetall(ENQUEUED_KEY)
    pipe.hgetall(COMPLETED_KEY)
    pipe.hgetall(DURATION_KEY)
    pipe.hgetall(ENQUEUED_BY_KIND_KEY)
    pipe.hgetall(COMPLETED_BY_KIND_KEY)
    pipe.hgetall(WAIT_KEY)
    enqueued_raw, completed_raw, duration_raw, enqueued_kind_raw, completed_kind_raw, wait_raw = pipe.execute()
    snap = Snapshot()
    for name, value in enqueued_kind_raw.items():
        queue, _, kind = _text(name).partition("|")  # neither a queue name nor a kind holds "|"
        snap.enqueued_by_kind[(queue, kind)] = int(value)
    for name, value in completed_kind_raw.items():
        queue, kind, status = _text(name).split("|", 2)
        snap.completed_by_kind[(queue, kind, status)] = int(value)
    for name, value in enqueued_raw.items():
        snap.enqueued[_text(name)] = int(value)
    for name, value in completed_raw.items():
        queue, _, status = _text(name).rpartition("|")
        snap.completed[(queue, status)] = int(value)
    snap.durations = _histograms(duration_raw)
    snap.waits = _histograms(wait_raw)
    return snap


def _histograms(raw: dict[Any, Any]) -> dict[str, tuple[list[tuple[str, int]], float]]:
    """Per queue: the cumulative count of every bucket (BUCKETS order) and the sum, from the stored fields."""
    per_queue: dict[str, dict[str, float]] = {}
    for name, value in raw.items():
        queue, _, part = _text(name).rpartition("|")
        per_queue.setdefault(queue, {})[part] = float(value)
    out = {}
    for queue, parts in per_queue.items():
        running = 0
        buckets = []
        for label in BUCKET_LABELS:
            running += int(parts.get(label, 0))
            buckets.append((label, running))
        out[queue] = (buckets, parts.get("sum", 0.0))
    return out


# A process that exits normally (SIGTERM handled: loops, gunicorn workers) writes what it holds.
atexit.register(flush)
