"""One INFO line every few seconds instead of a line per task: what the worker got done meanwhile.

At thousands of tasks a second, three log lines per task cost more than the
tasks (formatting, JSON, a write each) and drown what an operator looks for.
So a task's own lines (started, succeeded, acked) are DEBUG, and the summary
thread writes one ``worker.summary`` line per ``summary_interval`` that saw
any activity: tasks done, retried, dead and lost, the rate, and how many are
held now. Failures and lost leases keep their own WARNING lines. The
``worker.stop`` line carries the totals.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from taskforge_client.worker.flights import InFlight
from taskforge_client.worker.logs import EventLog

__all__ = ["OUTCOMES", "Summary"]

# done: acked. retried: nacked, to run again. dead: nacked for the last time.
# lost: its lease was gone (or its outcome dropped). handed_back: nacked at shutdown.
OUTCOMES = ("done", "retried", "dead", "lost", "handed_back")


class Summary:
    """Counts confirmed outcomes (from any thread); ``run()`` is the summary thread."""

    def __init__(self, log: EventLog, flights: InFlight, interval: float) -> None:
        self.log = log
        self.flights = flights
        self.interval = interval
        self._lock = threading.Lock()
        self._window: Counter[str] = Counter()
        self._totals: Counter[str] = Counter()
        self._window_start = time.monotonic()

    def count(self, outcome: str, n: int = 1) -> None:
        with self._lock:
            self._window[outcome] += n
            self._totals[outcome] += n

    def totals(self) -> dict[str, int]:
        with self._lock:
            return {outcome: self._totals[outcome] for outcome in OUTCOMES}

    def run(self, stop: threading.Event) -> None:
        """Write a summary every ``interval`` seconds until ``stop`` is set."""
        while not stop.wait(self.interval):
            try:
                self.write()
            except Exception as exc:  # a summary line is not worth the thread
                self.log(logging.ERROR, "worker.summary_error", f"summary failed: {exc!r}")

    def write(self) -> None:
        """The line for the time since the last one; nothing when the worker was idle throughout."""
        now = time.monotonic()
        with self._lock:
            window, self._window = self._window, Counter()
            seconds, self._window_start = now - self._window_start, now
        if not window:
            return
        finished = window["done"] + window["retried"] + window["dead"]
        rate = round(finished / seconds, 1) if seconds > 0 else 0.0
        counts = {outcome: window[outcome] for outcome in OUTCOMES}
        message = (
            f"{counts['done']} done, {counts['retried']} retried, {counts['dead']} dead, {counts['lost']} lost "
            f"in {seconds:.0f} s ({rate:g} tasks/s)"
        )
        held = self.flights.held_count()
        fields: dict[str, float] = {"seconds": round(seconds, 1), "rate": rate, "held": held, **counts}
        self.log(logging.INFO, "worker.summary", message, None, **fields)
