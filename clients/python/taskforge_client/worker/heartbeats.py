"""Keeps the leases of the tasks in flight alive; tells a handler when its lease is lost.

Every flight is beaten, still running or finished with its ack not yet
confirmed, each at its own interval (a third of its lease at most, see
``Flight.start``). A ``lease_lost`` (or ``not_found``) answer means another
worker may be running the task: its ``job.cancelled`` is set, and its
outcome will be dropped, never acked.
"""

from __future__ import annotations

import logging
import threading
import time

from taskforge_client.client import TaskForgeClient
from taskforge_client.errors import LeaseLost, NotFound, TaskForgeError
from taskforge_client.worker.flights import Flight, InFlight
from taskforge_client.worker.logs import EventLog

__all__ = ["Heartbeats"]


class Heartbeats:
    """Sends the heartbeats that are due; ``run()`` is the heartbeat thread."""

    def __init__(self, client: TaskForgeClient, flights: InFlight, log: EventLog, *, tick: float) -> None:
        self.client = client
        self.flights = flights
        self.log = log
        self.tick = tick

    def run(self, stop: threading.Event) -> None:
        """Beat every flight that is due, every ``tick`` seconds, until ``stop`` is set."""
        while not stop.wait(self.tick):
            for flight in self.flights.due_for_heartbeat(time.monotonic()):
                self.beat(flight)

    def beat(self, flight: Flight) -> None:
        job = flight.job
        try:
            self.client.heartbeat(job.worker_id, job.id, job.lease_token)
        except (LeaseLost, NotFound) as exc:
            if not self.flights.mark_lost(flight):
                return  # acked (or handed back) while this beat was on its way: nothing was lost
            job.cancelled.set()
            self.log(logging.WARNING, "task.lease_lost", f"heartbeat answered {exc.code}: stop working on it", job)
            return
        except TaskForgeError as exc:
            self.log(logging.WARNING, "heartbeat.error", f"heartbeat failed, trying again soon: {exc}", job)
            flight.next_beat = time.monotonic() + min(1.0, flight.beat_interval)
            return
        flight.next_beat = time.monotonic() + flight.beat_interval
