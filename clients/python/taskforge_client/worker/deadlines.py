"""Fails a task whose execution time limit passed, without waiting for its handler.

A claimed task may carry ``timeout_seconds``: the limit of one attempt,
counted from its claim (the server fails the attempt at ``claimed_at +
timeout_seconds`` whatever the worker does). The deadline thread nacks a
task still running at that point, with ``"execution timed out after N s"``
(retried as any failed attempt), and sets ``job.cancelled`` so a handler
that watches it stops.

A Python thread cannot be stopped from outside, so a handler that ignores
``job.cancelled`` runs on: its pool thread stays taken, and the task's
slot with it, until the handler returns, and what it returns is then
dropped. The worker runs fewer tasks at once meanwhile; it never starts
extra threads, which runaway handlers would pile up without bound.
"""

from __future__ import annotations

import logging
import threading
import time

from taskforge_client.worker.completer import Completer
from taskforge_client.worker.flights import InFlight, timeout_seconds
from taskforge_client.worker.logs import EventLog
from taskforge_client.worker.outcome import Outcome

__all__ = ["Deadlines", "timed_out_error"]


def timed_out_error(limit: float) -> str:
    """The nack's error, in the server's own words for the same event."""
    return f"execution timed out after {limit:g} s"


class Deadlines:
    """Nacks the running tasks whose time limit passed; ``run()`` is the deadline thread."""

    def __init__(self, flights: InFlight, completer: Completer, log: EventLog, *, tick: float) -> None:
        self.flights = flights
        self.completer = completer
        self.log = log
        self.tick = tick

    def run(self, stop: threading.Event) -> None:
        """Look for overdue tasks every ``tick`` seconds until ``stop`` is set."""
        while not stop.wait(self.tick):
            try:
                self.expire(time.monotonic())
            except Exception as exc:  # one bad round must not end the time limits of every task
                self.log(logging.ERROR, "task.timeout_error", f"time limit check failed: {exc!r}")

    def expire(self, now: float) -> None:
        for flight in self.flights.time_out(now):
            error = timed_out_error(timeout_seconds(flight.job.task) or 0.0)
            message = f"{error}: nacked; the handler is told to stop (job.cancelled) and its result will be dropped"
            self.log(logging.WARNING, "task.timed_out", message, flight.job)
            self.completer.submit(Outcome(flight, ack=False, error=error))
