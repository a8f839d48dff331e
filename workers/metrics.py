"""``taskforge_worker_heartbeat_age_seconds``: how long each worker has been silent.

Read from the worker registry (``tf_worker``) at scrape time, for the workers
``GET /workers`` lists (seen in the last 10 minutes), so a worker that went
away for good drops out instead of growing the label set forever.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.db import DatabaseError
from prometheus_client.core import GaugeMetricFamily, Metric

from workers import registry

logger = logging.getLogger("taskforge.metrics")


class WorkerMetricsCollector:
    def collect(self) -> Iterator[Metric]:
        try:
            workers = registry.active_workers()
        except DatabaseError as exc:
            logger.warning("worker registry unavailable: %s", exc, extra={"event": "metrics.workers_failed"})
            return
        age = GaugeMetricFamily(
            "taskforge_worker_heartbeat_age_seconds",
            "Seconds since the worker's last heartbeat (or claim, if more recent).",
            labels=["worker_id"],
        )
        for worker in workers:
            if worker["heartbeat_age_seconds"] is not None:
                age.add_metric([worker["worker_id"]], float(worker["heartbeat_age_seconds"]))
        yield age

    def describe(self) -> Iterator[Metric]:
        return iter(())
