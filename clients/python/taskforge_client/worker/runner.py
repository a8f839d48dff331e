"""The reference worker: claims tasks, runs a handler on them, hands the outcomes to the completer.

Standard library and httpx only: it never imports Django, except to run a
Django ``@task`` payload (see ``taskforge_client.worker.handlers``).

Threads, and why each exists:

1. The main thread claims: it long-polls for enough tasks to keep every
   handler busy plus a prefetch (up to ``concurrency x prefetch`` held, see
   ``taskforge_client.worker.flights``) and queues them for the pool. After a
   claim that got fewer tasks than it asked for, the next one starts no sooner
   than ``claim_cooldown`` after it: a stream of tasks enqueued one by one is
   then claimed a batch at a time, not one claim (and one bell) per task.
2. ``concurrency`` pool threads run the handler, one task each. A handler's
   return value (a dict or None) becomes an ack; an exception a nack
   (``taskforge_client.worker.outcome``).
3. The completer thread sends those acks and nacks, several per call
   (``taskforge_client.worker.completer``).
4. The heartbeat thread extends the lease of every task in flight, and stops
   a task whose lease is lost (``taskforge_client.worker.heartbeats``); the
   calls go out on a small pool of their own, so one slow call delays no
   other lease.
5. The deadline thread nacks a task still running when its execution time
   limit (``timeout_seconds``) passes (``taskforge_client.worker.deadlines``).
6. The summary thread writes one INFO line every ``summary_interval`` seconds
   with the tasks done, retried, dead and lost meanwhile; a line per task is
   DEBUG (``taskforge_client.worker.summary``).

Every one of these threads survives any exception from one call: it is
logged (with the task id when there is one) and treated like a transient
error, so the worker never goes on claiming while it can no longer ack.

An operator can quiet the worker (its claims are answered with no tasks:
it finishes what it holds and asks again every ``poll_interval``) or stop
it (the same, then it exits 0 once it holds nothing), from the admin's
workers page or ``POST /workers/{worker_id}/quiet|stop|resume``.

Shutdown (SIGTERM/SIGINT): claiming stops, prefetched tasks no handler started
are handed back at once, running tasks get ``grace_seconds``
to finish and be acked, the rest are nacked with retry ("worker shutting
down", retry at once) and the process exits 0. Handing back and the last acks
get at most ``HANDBACK_SECONDS`` more, so the process is gone within
``grace_seconds + HANDBACK_SECONDS`` of the signal (35 s with the default 30,
inside the 40 s the deploy files allow before they kill it). A second signal
skips the rest of the grace period.
"""

from __future__ import annotations

import logging
import platform
import queue
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

from taskforge_client.client import TaskForgeClient
from taskforge_client.errors import Forbidden, TaskForgeError, Unauthorized
from taskforge_client.version import __version__
from taskforge_client.worker.completer import MAX_BATCH, Completer
from taskforge_client.worker.config import Config
from taskforge_client.worker.deadlines import Deadlines
from taskforge_client.worker.flights import Flight, InFlight
from taskforge_client.worker.handlers import Handler, Handlers, KindRunner
from taskforge_client.worker.heartbeats import Heartbeats
from taskforge_client.worker.job import Job
from taskforge_client.worker.logs import EventLog
from taskforge_client.worker.outcome import cancelled_outcome, outcome_of
from taskforge_client.worker.queues import ClaimQueues
from taskforge_client.worker.summary import Summary

__all__ = ["HANDBACK_SECONDS", "Runner"]

# How often idle threads look at their stop flag: shutdown is never later than this.
TICK_SECONDS = 0.1
# After the grace period: the time left to hand back unfinished tasks and confirm the last acks.
HANDBACK_SECONDS = 5.0


class Runner:
    """One worker process's threads, working on TaskForge until stopped."""

    def __init__(
        self,
        config: Config,
        handler: Handler | None,
        client: TaskForgeClient | None = None,
        *,
        tasks: Mapping[str, KindRunner] | None = None,
        queues: Sequence[str] | None = None,
    ) -> None:
        self.config = config
        self.handler = handler
        self.tasks = tasks
        # An app's worker claims from its tasks' queues only; otherwise --queue, or any queue.
        self.claim_queues = ClaimQueues(list(queues) if queues else [config.queue], config.wait_seconds)
        # The admin's workers page shows what runs where: this worker's version and Python.
        agent = f"taskforge-worker/{__version__} python/{platform.python_version()}"
        self.client = client or TaskForgeClient(
            config.api_url, config.api_key, timeout=config.request_timeout, user_agent=agent
        )
        self.log = EventLog(config.worker_id)
        self.flights = InFlight(config.concurrency, config.prefetch)
        self.handlers = Handlers(handler, tasks)
        self.summary = Summary(self.log, self.flights, config.summary_interval)
        self.completer = Completer(
            self.client, self.flights, self.log, worker_id=config.worker_id, tick=TICK_SECONDS, tally=self.summary
        )
        self.heartbeats = Heartbeats(
            self.client, self.flights, self.log, tick=TICK_SECONDS, request_timeout=config.request_timeout
        )
        self.deadlines = Deadlines(self.flights, self.completer, self.log, tick=TICK_SECONDS)
        self._work: queue.Queue[Flight | None] = queue.Queue()
        self.stopping = threading.Event()
        self._stop_requested = 0.0  # monotonic time of the signal: the grace period counts from it
        self._hurry = threading.Event()
        self._threads_stop = threading.Event()
        self._control: str | None = None  # what an operator last asked (workers.controls on the server)

    # -- entry point

    def run(self) -> int:
        """Work until SIGTERM/SIGINT (or ``stop()``); returns the process exit code."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        threads = [
            threading.Thread(target=self._pool_loop, name=f"pool-{n}", daemon=True)
            for n in range(self.config.concurrency)
        ]
        loops = [
            ("completer", self.completer.run),
            ("heartbeat", self.heartbeats.run),
            ("deadline", self.deadlines.run),
        ]
        if self.config.summary_interval > 0:
            loops.append(("summary", self.summary.run))
        for name, loop in loops:
            threads.append(threading.Thread(target=loop, args=(self._threads_stop,), name=name, daemon=True))
        for thread in threads:
            thread.start()
        self.log(
            logging.INFO,
            "worker.start",
            "worker started",
            queue=self.config.queue,
            queues=self.claim_queues.queues,
            kinds=sorted(self.tasks) if self.tasks is not None else None,
            concurrency=self.config.concurrency,
            prefetch=self.config.prefetch,
            handler=self.config.handler,
            api_url=self.config.api_url,
        )
        if self.handler is None and self.tasks is None and not self.config.django_settings:
            self.log(
                logging.WARNING,
                "worker.no_handler",
                "no --handler and no DJANGO_SETTINGS_MODULE: every task will fail until one is given",
            )
        code = 0
        try:
            self._claim_loop()
        except (Unauthorized, Forbidden) as exc:
            self.log(logging.ERROR, "worker.auth", f"TaskForge refused this worker's key: {exc}")
            code = 1
        self._drain()
        self._threads_stop.set()
        for _ in range(self.config.concurrency):
            self._work.put(None)
        self.client.close()
        self.log(logging.INFO, "worker.stop", "worker stopped", None, exit_code=code, **self.summary.totals())
        return code

    def stop(self) -> None:
        if not self.stopping.is_set():
            self._stop_requested = time.monotonic()
        self.stopping.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping.is_set():
            self._hurry.set()  # a second signal: no more grace
            return
        self.log(logging.INFO, "worker.stopping", f"received {signal.Signals(signum).name}: draining")
        self.stop()

    # -- 1. claiming (main thread)

    def _claim_loop(self) -> None:
        while not self.stopping.is_set():
            room = self.flights.room(wait=TICK_SECONDS)
            if room <= 0:
                continue
            asked = time.monotonic()
            queue, wait = self.claim_queues.next()
            try:
                tasks = self.client.claim(
                    self.config.worker_id, queue, max_tasks=min(room, MAX_BATCH), wait_seconds=wait
                )
            except (Unauthorized, Forbidden):
                raise
            except TaskForgeError as exc:
                self.log(logging.WARNING, "claim.error", f"claim failed: {exc}", queue=queue)
                self.claim_queues.claimed(False)
                self.stopping.wait(self.config.poll_interval)
                continue
            except Exception as exc:  # an answer nobody expected: pause, as after any failed claim
                self.log(logging.ERROR, "claim.error", f"claim failed unexpectedly: {exc!r}", queue=queue)
                self.claim_queues.claimed(False)
                self.stopping.wait(self.config.poll_interval)
                continue
            if self._obeyed(getattr(tasks, "control", None)):
                return
            self.claim_queues.claimed(bool(tasks))
            flights = self._flights(tasks)
            if self.stopping.is_set():
                # Claimed while the signal arrived: hand them straight back.
                self.completer.give_back(flights, self._handback_deadline(), started=False)
                return
            for flight in flights:
                self.flights.add(flight)
                self._work.put(flight)
            cooldown = asked + self.config.claim_cooldown - time.monotonic()
            if tasks and len(tasks) < min(room, MAX_BATCH) and cooldown > 0:
                # Tasks are trickling in: let the next ones gather, then take them in one claim.
                self.stopping.wait(cooldown)
            if not tasks and time.monotonic() - asked < wait / 2:
                # An empty answer that did not wait (short polling, a paused queue): pause.
                # After a full long poll the server has waited already: ask again at once.
                self.stopping.wait(self.config.poll_interval)

    def _obeyed(self, control: str | None) -> bool:
        """Follow an operator's control from a claim answer; True once told to stop and holding nothing.

        Quiet: the server answers with no tasks at once, so the loop asks
        again only every ``poll_interval`` until resumed. Stop: wait for every held
        task to finish and be acked, then stop as after a signal (which still
        cuts the wait short, with the usual grace period).
        """
        if control != self._control:
            if control is None:
                message = "an operator resumed this worker: claiming again"
            else:
                message = f"an operator asked this worker to {control}: claiming nothing more, finishing the tasks held"
                message += ", then exiting" if control == "stop" else ""
            held = self.flights.held_count()
            self.log(logging.INFO, "worker.control", message, control=control or "resume", held=held)
            self._control = control
        if control is None:
            return False
        if control == "stop":
            self.flights.wait_until_empty(float("inf"), self.stopping, TICK_SECONDS)
            if not self.stopping.is_set():
                self.stop()
            return True
        return False  # quiet: the empty answer came at once, so the claim loop pauses poll_interval

    def _flights(self, tasks: list[dict[str, Any]]) -> list[Flight]:
        """A flight per claimed task; a task the worker cannot read is left to its lease's expiry."""
        flights = []
        for task in tasks:
            try:
                job = Job.from_claim(task, worker_id=self.config.worker_id, default_queue=self.config.queue)
            except Exception as exc:
                self.log(logging.ERROR, "claim.bad_task", f"claimed task unreadable, left to expire: {exc!r}")
                continue
            flights.append(Flight.start(job, self.config.heartbeat_interval))
        return flights

    # -- 2. running (pool threads)

    def _pool_loop(self) -> None:
        while True:
            flight = self._work.get()
            if flight is None:
                return
            try:
                self._execute(flight)
            except Exception as exc:  # a bug here must not cost a handler thread
                self.log(logging.ERROR, "task.crash", f"running the task failed: {exc!r}", flight.job)
                if flight.state in ("running", "timed_out"):  # give back the handler slot it held
                    self.flights.handler_returned(flight)
                self.flights.forget(flight)

    def _execute(self, flight: Flight) -> None:
        job = flight.job
        if not self.flights.begin(flight):
            # Handed back at shutdown, or its lease lost while it waited: never run it.
            if flight.lost:
                self.summary.count("lost")
                self.log(logging.WARNING, "task.dropped", "task dropped before it started: its lease was lost", job)
            return
        self.log(logging.DEBUG, "task.start", "task started", job)
        # A task cancelled while it waited never runs; one cancelled while it ran is nacked, whatever it
        # returned, and the server makes it ``cancelled``.
        outcome = cancelled_outcome(flight) if job.cancel_requested else outcome_of(flight, lambda: self.handlers(job))
        if job.cancel_requested and (outcome.ack or outcome.retry):
            outcome = cancelled_outcome(flight)
        elapsed_ms = round((time.monotonic() - flight.started) * 1000)
        dropped = self.flights.handler_returned(flight)
        if dropped:
            if flight.state != "timed_out":  # a timed-out task's nack is the completer's to confirm (and count)
                self.flights.forget(flight)  # this pool thread is free again
                self.summary.count("lost")
            message = f"task finished but {dropped}: outcome dropped"
            self.log(logging.WARNING, "task.dropped", message, job, duration_ms=elapsed_ms)
            return
        if outcome.ack:
            self.log(logging.DEBUG, "task.succeeded", "task succeeded", job, duration_ms=elapsed_ms)
        else:
            self.log(
                logging.WARNING,
                "task.failed",
                f"task failed: {outcome.error.splitlines()[0] if outcome.error else ''}",
                job,
                duration_ms=elapsed_ms,
                retry=outcome.retry,
                retry_after_seconds=outcome.retry_after_seconds,
            )
        self.completer.submit(outcome)

    # -- shutdown

    def _drain(self) -> None:
        """Let running tasks finish within the grace period; hand back the rest."""
        # A claim in flight when the signal came may have used some of the grace period.
        deadline = (self._stop_requested or time.monotonic()) + self.config.grace_seconds
        end = self._handback_deadline()
        self.completer.give_back(self.flights.abandon_waiting(), end, started=False)
        self.flights.wait_until_empty(deadline, self._hurry, TICK_SECONDS)
        self.completer.give_back(self.flights.abandon_running(), end, started=True)
        # Outcomes already handed to the completer: their acks get what is left of the bounded moment.
        self.flights.wait_until_empty(end, threading.Event(), TICK_SECONDS)

    def _handback_deadline(self) -> float:
        """When the shutdown must be over: the grace period from the signal, then ``HANDBACK_SECONDS``."""
        start = self._stop_requested or time.monotonic()
        return start + self.config.grace_seconds + HANDBACK_SECONDS
