"""Keeps the leases of the tasks in flight alive; tells a handler when its lease is lost.

Every flight is beaten, still running or finished with its ack not yet
confirmed, each at its own interval (a third of its lease at most, see
``Flight.start``). A ``lease_lost`` (or ``not_found``) answer means another
worker may be running the task: its ``job.cancelled`` is set, and its
outcome will be dropped, never acked.

One slow connection must not cost the other leases, so the heartbeat thread
only finds the beats that are due and hands them to a small pool: each call
is sent once (no retries inside the client) with a timeout no longer than
the beat interval and never past the lease, and a failed beat is tried again
about a second later by the same schedule. A lease that runs out before any
beat got through is given up like a lost one: the server reclaims the task.
Any exception from one call (an unexpected answer, a bug) is logged with the
task id and treated like a failed beat; it never stops the thread.

A heartbeat carries the job's latest ``progress`` report, if one is waiting
(a failed beat keeps it for the next). An answer with ``cancel_requested:
true`` (a producer cancelled the running task) sets ``job.cancelled`` and
``job.cancel_requested``: the runner nacks the task once its handler ends.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from taskforge_client.client import TaskForgeClient
from taskforge_client.errors import LeaseLost, NotFound, TaskForgeError
from taskforge_client.worker.flights import Flight, InFlight
from taskforge_client.worker.job import Job
from taskforge_client.worker.logs import EventLog

__all__ = ["HEARTBEAT_THREADS", "Heartbeats"]

# Beats in progress at once: a few stuck connections still leave room for the rest.
HEARTBEAT_THREADS = 4
# After a failed beat, the next try (never later than the beat interval).
RETRY_SECONDS = 1.0
# The shortest timeout a beat is given: below it a loaded machine fails beats that would have got through.
MIN_CALL_SECONDS = 0.5


class Heartbeats:
    """Sends the heartbeats that are due; ``run()`` is the heartbeat thread."""

    def __init__(
        self,
        client: TaskForgeClient,
        flights: InFlight,
        log: EventLog,
        *,
        tick: float,
        request_timeout: float = 15.0,
        threads: int = HEARTBEAT_THREADS,
    ) -> None:
        self.client = client
        self.flights = flights
        self.log = log
        self.tick = tick
        self.request_timeout = request_timeout
        self.threads = threads

    def run(self, stop: threading.Event) -> None:
        """Beat every flight that is due, every ``tick`` seconds, until ``stop`` is set."""
        # Daemon threads, not an executor's: a call still on its way must not hold up the process's exit.
        due: queue.Queue[Flight | None] = queue.Queue()
        for n in range(self.threads):
            threading.Thread(target=self._sender, args=(due,), name=f"heartbeat-{n}", daemon=True).start()
        try:
            while not stop.wait(self.tick):
                try:
                    self._send_due(due)
                except Exception as exc:  # never let one bad round end the heartbeats of every task
                    self.log(logging.ERROR, "heartbeat.crash", f"heartbeat round failed: {exc!r}")
        finally:
            for _ in range(self.threads):
                due.put(None)

    def _sender(self, due: queue.Queue[Flight | None]) -> None:
        while (flight := due.get()) is not None:
            self.beat(flight)

    def _send_due(self, due: queue.Queue[Flight | None]) -> None:
        now = time.monotonic()
        for flight in self.flights.due_for_heartbeat(now):
            if flight.lease_left(now) <= 0:
                self._lease_gone(flight, "no heartbeat got through before the lease ran out")
                self.flights.beat_done(flight, now + flight.beat_interval)
                continue
            due.put(flight)

    def beat(self, flight: Flight) -> None:
        """Send one heartbeat for ``flight`` and schedule its next one (from a sender thread)."""
        job = flight.job
        sent_at = time.monotonic()
        next_beat = sent_at + min(RETRY_SECONDS, flight.beat_interval)
        progress = job.take_progress()
        try:
            answer = self.client.heartbeat(
                job.worker_id,
                job.id,
                job.lease_token,
                timeout=self._call_timeout(flight, sent_at),
                retry=False,
                progress=progress,
            )
        except (LeaseLost, NotFound) as exc:
            self._lease_gone(flight, f"heartbeat answered {exc.code}")
        except TaskForgeError as exc:
            self._put_back(job, progress)
            self.log(logging.WARNING, "heartbeat.error", f"heartbeat failed, trying again soon: {exc}", job)
        except Exception as exc:  # an answer nobody expected: a failed beat, not a dead thread
            self._put_back(job, progress)
            self.log(logging.ERROR, "heartbeat.error", f"heartbeat failed unexpectedly: {exc!r}", job)
        else:
            flight.extended(sent_at)
            next_beat = sent_at + flight.beat_interval
            said: Any = answer  # a proxy may answer 200 with anything: only a dict can ask to cancel
            if isinstance(said, dict) and said.get("cancel_requested") is True and not job.cancel_requested:
                job.request_cancel()
                self.log(logging.INFO, "task.cancel_requested", "cancel requested: telling the handler to stop", job)
        finally:
            self.flights.beat_done(flight, next_beat)

    @staticmethod
    def _put_back(job: Job, progress: dict[str, Any] | None) -> None:
        if progress is not None:  # not delivered: it goes with the next beat, unless a newer one came
            job.put_back_progress(progress)

    def _call_timeout(self, flight: Flight, now: float) -> float:
        """At most one beat interval, and never past the lease: a stuck call gives way to a retry in time."""
        longest = min(self.request_timeout, max(flight.beat_interval, MIN_CALL_SECONDS))
        return max(MIN_CALL_SECONDS, min(longest, flight.lease_left(now)))

    def _lease_gone(self, flight: Flight, why: str) -> None:
        if not self.flights.mark_lost(flight):
            return  # acked (or handed back) while this beat was on its way: nothing was lost
        flight.job.cancelled.set()
        self.log(logging.WARNING, "task.lease_lost", f"{why}: stop working on it", flight.job)
