"""The tasks this worker holds, from claim until their outcome is confirmed or dropped.

Three kinds of thread share this table: the claimer adds flights and waits
for room to claim more, pool threads start and finish them, the completer and
the heartbeat thread read and remove them. One lock (never taken twice by a thread) guards
the table, the count of running handlers and every flight's ``state`` and
``lost`` flag; a condition on it wakes whoever waits for a slot or for the
table to empty.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from taskforge_client.worker.config import MIN_HEARTBEAT_SECONDS
from taskforge_client.worker.job import Job

__all__ = ["PREFETCH_HORIZON_SECONDS", "Flight", "InFlight", "lease_seconds", "timeout_seconds"]

State = Literal["waiting", "running", "timed_out", "reporting", "abandoned"]

# Prefetched tasks wait for a free handler at most about this long: the worker
# holds no more of them than its handlers finish in this time (at their recent
# pace). Short tasks get the whole prefetch; long ones are not hoarded away
# from other workers, and a held task starts well before its lease is at risk.
PREFETCH_HORIZON_SECONDS = 1.0
# Weight of the newest handler duration in the running average.
DURATION_SMOOTHING = 0.2


@dataclass
class Flight:
    """A claimed task from claim until its ack/nack is confirmed or it is dropped.

    ``waiting``: prefetched, held until a handler is free (its lease is
    heartbeaten like a running task's). ``running``: its handler runs.
    ``reporting``: the handler returned and
    the outcome waits for the completer. ``abandoned``: the shutdown grace ran
    out and the task was handed back; whatever the handler returns is dropped.
    ``timed_out``: its execution time limit passed while the handler ran; it
    was nacked and whatever the handler returns is dropped, but the handler
    keeps its slot until it returns (a thread cannot be stopped).
    ``lost``: a heartbeat answered ``lease_lost`` (or no heartbeat got
    through before the lease ran out); never ack it.

    ``lease_expires`` is when the lease runs out by this worker's clock (the
    last heartbeat that got through plus the lease length; infinite when the
    server did not say how long a lease is). The time limit is left to the
    deadline thread, which nacks the task at ``deadline``. ``beating``: a heartbeat of it is
    on its way. ``deadline``: when its execution time limit passes, if it has one.
    """

    job: Job
    beat_interval: float
    next_beat: float
    started: float
    state: State = "waiting"
    lost: bool = False
    lease: float | None = None
    lease_expires: float = math.inf
    beating: bool = False
    deadline: float = math.inf

    @classmethod
    def start(cls, job: Job, heartbeat_interval: float) -> Flight:
        interval = heartbeat_interval
        lease = lease_seconds(job.task)
        if lease:
            # Several beats per lease, so one slow or lost heartbeat does not cost the task.
            interval = max(MIN_HEARTBEAT_SECONDS, min(interval, lease / 3))
        now = time.monotonic()
        limit = timeout_seconds(job.task)
        deadline = now + limit if limit else math.inf
        return cls(
            job=job,
            beat_interval=interval,
            next_beat=now + interval,
            started=now,
            lease=lease,
            lease_expires=now + lease if lease else math.inf,
            deadline=deadline,
        )

    def lease_left(self, now: float) -> float:
        """Seconds until the lease runs out by this worker's clock (negative once it has)."""
        return self.lease_expires - now

    def extended(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` got through: the lease runs from then."""
        if self.lease:
            self.lease_expires = sent_at + self.lease

    @property
    def held(self) -> bool:
        """Claimed and its handler not yet returned (waiting or running)."""
        return self.state in ("waiting", "running")


def lease_seconds(task: Mapping[str, Any]) -> float | None:
    """The lease length the server grants, from its own two timestamps (no clock skew)."""
    try:
        granted = datetime.fromisoformat(task["lease_expires_at"]) - datetime.fromisoformat(task["claimed_at"])
    except (KeyError, TypeError, ValueError):
        return None
    return granted.total_seconds()


def timeout_seconds(task: Mapping[str, Any]) -> float | None:
    """The task's execution time limit in seconds (``timeout_seconds``), or None when it has none."""
    value = task.get("timeout_seconds")
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return None
    return float(value)


class InFlight:
    """Every flight of this worker by task id, and how many are held and running.

    The worker holds up to ``concurrency x prefetch`` tasks (fewer while
    handlers are slow, see ``PREFETCH_HORIZON_SECONDS``), so a handler that
    returns finds its next task already here instead of waiting for a claim.
    A task stops counting against that limit when its handler returns, not
    when the ack is confirmed: the next claim overlaps the ack instead of
    waiting for it. But every flight counts against ``most``, the ceiling of
    the table: held tasks plus outcomes not yet confirmed by the server. While
    acks fail (TaskForge half down), outcomes pile up to that ceiling and the
    worker stops claiming, instead of claiming without bound.
    """

    def __init__(self, concurrency: int, prefetch: int = 1) -> None:
        self.concurrency = concurrency
        self.capacity = concurrency * max(1, prefetch)
        # One handler round of unconfirmed outcomes beyond the held tasks: enough for acks to overlap claims.
        self.most = self.capacity + concurrency
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._flights: dict[str, Flight] = {}
        self._held = 0  # waiting + running
        self._running = 0
        self._mean_duration: float | None = None  # seconds, smoothed; None until a handler returned

    def room(self, wait: float) -> int:
        """How many tasks to claim now; when it is not yet worth a claim, first wait up to ``wait`` seconds.

        A claim is made when a handler may soon be idle (no task waits) or
        when half the current limit is free: one claim fetches many tasks
        instead of one claim per finished task.
        """
        with self._changed:
            limit = self._limit()
            room = min(limit - self._held, self.most - len(self._flights))
            waiting = self._held - self._running
            if room > 0 and (waiting <= 0 or room >= limit // 2):
                return room
            self._changed.wait(wait)
            return 0

    def _limit(self) -> int:
        """Tasks to hold: one per handler, plus what the handlers finish within the horizon."""
        extra = self.capacity - self.concurrency
        if self._mean_duration is None:
            return self.concurrency  # no pace known yet: do not hoard long tasks
        if self._mean_duration > 0:
            extra = min(extra, int(self.concurrency * PREFETCH_HORIZON_SECONDS / self._mean_duration))
        return self.concurrency + extra

    def add(self, flight: Flight) -> None:
        with self._lock:
            self._flights[flight.job.id] = flight
            self._held += 1

    def begin(self, flight: Flight) -> bool:
        """A pool thread takes the flight: True to run its handler, False when it was handed back or lost."""
        with self._lock:
            if flight.state != "waiting" or flight.lost:
                if flight.state == "waiting":  # lost while it waited: never run it
                    flight.state = "abandoned"
                    self._held -= 1
                    self._flights.pop(flight.job.id, None)
                    self._changed.notify_all()
                return False
            flight.state = "running"
            flight.started = time.monotonic()
            self._running += 1
            return True

    def handler_returned(self, flight: Flight) -> str:
        """Free the flight's slot; why its outcome must be dropped, or "" to report it."""
        with self._changed:
            self._running -= 1
            self._held -= 1
            duration = time.monotonic() - flight.started
            mean = self._mean_duration
            self._mean_duration = duration if mean is None else mean + DURATION_SMOOTHING * (duration - mean)
            self._changed.notify_all()
            if flight.state == "abandoned":
                return "the shutdown grace period had run out (it was nacked)"
            if flight.state == "timed_out":
                return "its execution time limit had passed (it was nacked)"
            if flight.lost:
                return "its lease was lost (another worker may run it)"
            flight.state = "reporting"
            return ""

    def time_out(self, now: float) -> list[Flight]:
        """The running flights whose time limit passed by ``now``, now ``timed_out`` and told to stop."""
        with self._lock:
            late = [f for f in self._flights.values() if f.state == "running" and f.deadline <= now and not f.lost]
            for flight in late:
                flight.state = "timed_out"
                flight.job.cancelled.set()
            return late

    def forget(self, flight: Flight) -> None:
        """Done with it: its outcome was confirmed, refused or dropped."""
        with self._changed:
            if self._flights.get(flight.job.id) is flight:
                del self._flights[flight.job.id]
                self._changed.notify_all()

    def due_for_heartbeat(self, now: float) -> list[Flight]:
        """The flights whose heartbeat is due and not already on its way; each is marked ``beating``."""
        with self._lock:
            due = [
                f
                for f in self._flights.values()
                if f.next_beat <= now and not f.lost and not f.beating and f.state != "abandoned"
            ]
            for flight in due:
                flight.beating = True
            return due

    def beat_done(self, flight: Flight, next_beat: float) -> None:
        """Its heartbeat came back (or failed): the next one is due at ``next_beat``."""
        with self._lock:
            flight.next_beat = next_beat
            flight.beating = False

    def unconfirmed_count(self) -> int:
        """Flights in the table: held, or finished with the outcome not yet confirmed."""
        with self._lock:
            return len(self._flights)

    def mark_lost(self, flight: Flight) -> bool:
        """Record that its lease is gone; False when it was acked (or handed back) meanwhile."""
        with self._lock:
            if self._flights.get(flight.job.id) is not flight:
                return False
            flight.lost = True
            return True

    def wait_until_empty(self, deadline: float, hurry: threading.Event, tick: float) -> None:
        """Wait for every flight to end, until the monotonic ``deadline`` or ``hurry`` is set."""
        with self._changed:
            while self._flights and time.monotonic() < deadline and not hurry.is_set():
                self._changed.wait(tick)

    def held_count(self) -> int:
        with self._lock:
            return self._held

    def abandon_waiting(self) -> list[Flight]:
        """Take back the prefetched flights no handler started: their tasks will be handed back."""
        with self._changed:
            idle = [f for f in self._flights.values() if f.state == "waiting"]
            self._abandon(idle)
            self._held -= len(idle)
            return idle

    def abandon_running(self) -> list[Flight]:
        """Take back the flights whose handlers still run: their tasks will be handed back."""
        with self._changed:
            late = [f for f in self._flights.values() if f.state == "running"]
            self._abandon(late)
            return late

    def _abandon(self, flights: list[Flight]) -> None:
        for flight in flights:
            flight.state = "abandoned"
            flight.job.cancelled.set()
            del self._flights[flight.job.id]
        if flights:
            self._changed.notify_all()
