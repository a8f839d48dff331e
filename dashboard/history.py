"""The overview's history charts: per queue, finished attempts and p95 latencies over an hour, a day or a week.

The figures are the API's (``GET /queues/{name}/history``), read for every
queue at once from the samples on step boundaries (``queues.telemetry.history``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dashboard.charts import Series, line_chart
from queues.telemetry import history
from taskforge.infra.clock import database_now

#: name -> (span, step): 60, 96 and 168 points.
RANGES: dict[str, tuple[timedelta, timedelta]] = {
    "hour": (timedelta(hours=1), timedelta(minutes=1)),
    "day": (timedelta(days=1), timedelta(minutes=15)),
    "week": (timedelta(days=7), timedelta(hours=1)),
}
DEFAULT_RANGE = "hour"


def _floor(moment: datetime, step: timedelta) -> datetime:
    seconds = int(step.total_seconds())
    return datetime.fromtimestamp(int(moment.timestamp()) // seconds * seconds, tz=UTC)


def _sum(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def charts(range_name: str) -> dict[str, Any]:
    """The template's context: the range shown, the ranges offered, one row of charts per queue."""
    if range_name not in RANGES:
        range_name = DEFAULT_RANGE
    span, step = RANGES[range_name]
    now = database_now()
    since = _floor(now - span, step)
    rows = []
    for queue, points in sorted(history.history_of_every_queue(since, now, step).items()):
        finished = line_chart(
            [
                Series("completed", "tf-line-ok", [p["completed"] for p in points]),
                Series(
                    "failed, dead or expired",
                    "tf-line-bad",
                    [_sum(p["failed"], p["dead"], p["expired"]) for p in points],
                ),
                Series("enqueued", "tf-line-in", [p["enqueued"] for p in points]),
            ],
            title=f"tasks per {_step_name(step)}",
        )
        latency = line_chart(
            [
                Series("enqueue-to-start p95", "tf-line-wait", [p["wait_p95_ms"] for p in points]),
                Series("execution p95", "tf-line-run", [p["run_p95_ms"] for p in points]),
            ],
            title="latency",
            unit=" ms",
        )
        rows.append({"queue": queue, "finished": finished, "latency": latency})
    return {"range": range_name, "ranges": list(RANGES), "since": since, "rows": rows}


def _step_name(step: timedelta) -> str:
    minutes = int(step.total_seconds() // 60)
    return "minute" if minutes == 1 else f"{minutes} minutes" if minutes < 60 else f"{minutes // 60} hour"
