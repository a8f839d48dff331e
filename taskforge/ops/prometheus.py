"""Rendering /metrics: request metrics plus the collectors the apps register.

django-prometheus' request metrics live in each API process. Under gunicorn
every worker process writes them to a shared directory
(``PROMETHEUS_MULTIPROC_DIR``, set up by ``taskforge.ops.prometheus_multiprocess``)
and a scrape, whichever worker answers it, sums all of them (each process
writes its requests' metrics in batches: ``taskforge.ops.metric_batches``). Without that
directory (``runserver``, tests) the process's own registry is used.

The product metrics do not depend on either: the apps' collectors read
Redis and Postgres, which every process shares.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from taskforge.ops import metric_batches

_collectors: list[Any] = []


def register(collector: Any) -> None:
    """Add a collector (an object with ``collect()``) to every scrape; called from ``AppConfig.ready``."""
    if collector not in _collectors:
        _collectors.append(collector)


def render_metrics() -> tuple[bytes, str]:
    registry = CollectorRegistry()
    metric_batches.write_pending()  # this process's latest requests, batched, go to its file first
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # unannotated in prometheus_client
    else:
        registry.register(REGISTRY)
    for collector in _collectors:
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_LATEST
