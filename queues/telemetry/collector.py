"""The product metrics of ``/metrics``, built at scrape time.

Counters and the histogram come from Redis (``queues.telemetry.counters``: summed over
every process that made a move), gauges from Postgres (``queues.telemetry.depth``).
Either store being down drops only its own families from the scrape, so
``/metrics`` keeps answering with what it can (and says so in the log).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

import redis
from django.conf import settings
from django.db import DatabaseError
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from queues.models import Queue
from queues.push import semaphore
from queues.telemetry import counters, depth, push_metrics

logger = logging.getLogger("taskforge.metrics")


class TaskMetricsCollector:
    def collect(self) -> Iterator[Metric]:
        try:
            depths = depth.shared_queue_depths()
        except DatabaseError as exc:
            logger.warning("queue depth unavailable: %s", exc, extra={"event": "metrics.depth_failed"})
            depths = []
        try:
            totals = counters.snapshot()
        except (redis.RedisError, OSError) as exc:
            logger.warning("task counters unavailable: %s", exc, extra={"event": "metrics.read_failed"})
            totals = None
        queue_names = [entry.name for entry in depths]
        if totals is not None:
            yield from _counters(totals, queue_names)
        yield from _gauges(depths)
        yield from _push()

    def describe(self) -> Iterator[Metric]:
        # Nothing at registration time: describing must not touch Postgres or Redis.
        return iter(())


def _counters(totals: counters.Snapshot, queue_names: list[str]) -> Iterator[Metric]:
    # Every existing queue gets its series at 0, so rate() works from the first task;
    # series of deleted queues stay as they were (counters never go back).
    enqueued = CounterMetricFamily(
        "taskforge_tasks_enqueued", "Tasks accepted by enqueue (idempotent replays excluded).", labels=["queue"]
    )
    for queue in sorted(set(queue_names) | set(totals.enqueued)):
        enqueued.add_metric([queue], totals.enqueued.get(queue, 0))
    yield enqueued

    completed = CounterMetricFamily(
        "taskforge_tasks_completed",
        "Finished attempts by outcome (done: acked; failed: nacked with retries left; dead: nacked into the DLQ; "
        "expired: lease expired) and cancelled tasks.",
        labels=["queue", "status"],
    )
    queues = sorted(set(queue_names) | {queue for queue, _ in totals.completed})
    for queue in queues:
        for status in counters.COMPLETION_STATUSES:
            completed.add_metric([queue, status], totals.completed.get((queue, status), 0))
    yield completed

    yield _per_queue_histogram(
        "taskforge_task_execution_duration_seconds",
        "Claim to ack, nack or lease expiry, for every finished attempt.",
        queue_names,
        totals.durations,
        counters.BUCKET_LABELS,
    )
    yield _per_queue_histogram(
        "taskforge_task_wait_seconds",
        "Enqueue to start: from a task's scheduled_at (its enqueue time when due at once) to its claim, per claim.",
        queue_names,
        totals.waits,
        counters.BUCKET_LABELS,
    )
    if settings.TASKFORGE_METRICS_KIND_LABEL:
        yield from _by_kind(totals)


def _per_queue_histogram(
    name: str,
    documentation: str,
    queue_names: Sequence[str],
    per_queue: Mapping[str, tuple[list[tuple[str, int]], float]],
    labels: Sequence[str],
) -> HistogramMetricFamily:
    """A histogram family with one series per queue, known queues with no observation yet included (at 0)."""
    family = HistogramMetricFamily(name, documentation, labels=["queue"])
    empty = ([(label, 0) for label in labels], 0.0)
    for queue in sorted(set(queue_names) | set(per_queue)):
        buckets, total = per_queue.get(queue, empty)
        family.add_metric([queue], buckets, total)
    return family


def _by_kind(totals: counters.Snapshot) -> Iterator[Metric]:
    """The opt-in families labelled by task kind too (tasks that have a kind; see TASKFORGE_METRICS_KIND_LABEL)."""
    enqueued = CounterMetricFamily(
        "taskforge_tasks_enqueued_by_kind", "Tasks accepted by enqueue, by kind.", labels=["queue", "kind"]
    )
    for (queue, kind), value in sorted(totals.enqueued_by_kind.items()):
        enqueued.add_metric([queue, kind], value)
    yield enqueued
    completed = CounterMetricFamily(
        "taskforge_tasks_completed_by_kind",
        "Finished attempts by outcome, and cancelled tasks, by kind (statuses as taskforge_tasks_completed).",
        labels=["queue", "kind", "status"],
    )
    for (queue, kind, status), value in sorted(totals.completed_by_kind.items()):
        completed.add_metric([queue, kind, status], value)
    yield completed


def _gauges(depths: list[depth.QueueDepth]) -> Iterator[Metric]:
    by_status = GaugeMetricFamily(
        "taskforge_queue_depth",
        "Tasks by status now (pending: due; scheduled: pending, not yet due). "
        "done and cancelled are recounted every 30 s (less often on very large tables).",
        labels=["queue", "status"],
    )
    dlq = GaugeMetricFamily("taskforge_dlq_depth", "Dead tasks waiting in the dead-letter queue.", labels=["queue"])
    oldest = GaugeMetricFamily(
        "taskforge_queue_oldest_pending_age_seconds",
        "How long the oldest due pending task has been waiting (0 when none).",
        labels=["queue"],
    )
    for entry in depths:
        for status in depth.DEPTH_STATUSES:
            by_status.add_metric([entry.name, status], entry.depth[status])
        dlq.add_metric([entry.name], entry.dlq_depth)
        oldest.add_metric([entry.name], entry.oldest_pending_age_seconds or 0.0)
    yield by_status
    yield dlq
    yield oldest


def _push() -> Iterator[Metric]:
    """Deliveries of push queues (Redis) and those in flight now (the semaphores, also Redis)."""
    try:
        push_queues = list(Queue.objects.filter(push__isnull=False).values_list("name", flat=True))
    except DatabaseError as exc:
        logger.warning("push queues unavailable: %s", exc, extra={"event": "metrics.depth_failed"})
        push_queues = []
    try:
        totals = push_metrics.snapshot()
        in_flight = {name: semaphore.in_flight(name) for name in push_queues}
    except (redis.RedisError, OSError) as exc:
        logger.warning("push metrics unavailable: %s", exc, extra={"event": "metrics.read_failed"})
        return
    deliveries = CounterMetricFamily(
        "taskforge_push_deliveries",
        "Push deliveries by outcome (2xx, 3xx, 4xx, 5xx answers; timeout, connection_error, refused).",
        labels=["queue", "outcome"],
    )
    for queue in sorted(set(push_queues) | {queue for queue, _ in totals.deliveries}):
        for outcome in push_metrics.OUTCOMES:
            deliveries.add_metric([queue, outcome], totals.deliveries.get((queue, outcome), 0))
    yield deliveries
    yield _per_queue_histogram(
        "taskforge_push_delivery_duration_seconds",
        "From sending a push delivery to its answer read (or its failure).",
        push_queues,
        totals.latencies,
        push_metrics.BUCKET_LABELS,
    )
    gauge = GaugeMetricFamily(
        "taskforge_push_in_flight", "Push deliveries in flight now, across every pusher.", labels=["queue"]
    )
    for queue in sorted(in_flight):
        gauge.add_metric([queue], in_flight[queue])
    yield gauge
