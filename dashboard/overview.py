"""The queue overview's data: one snapshot of every queue, for the index page and the stream.

``queue_stats`` is the same function behind ``GET /queues/{name}/stats`` and
``/metrics``, so the dashboard never disagrees with the API. A snapshot is
plain JSON-ready data: the index page renders it, the stream sends it.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from queues.models import Queue
from queues.stats import queue_stats


def snapshot() -> dict[str, Any]:
    """Every queue's stats plus the settings an operator watches (paused, rate limit)."""
    queues = list(Queue.objects.order_by("name"))
    rows = []
    for queue, stats in zip(queues, queue_stats(queues), strict=True):
        rows.append(
            {
                **stats,
                "id": str(queue.id),
                "rate_limit": queue.rate_limit,
                "rate_burst": queue.effective_burst,
                "max_retries": queue.max_retries,
            }
        )
    return {"at": timezone.now().isoformat(), "queues": rows}
