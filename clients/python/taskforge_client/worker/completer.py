"""Reports outcomes to TaskForge: acks and nacks, batched, retried while the lease holds.

The completer thread takes every outcome that finished meanwhile at once, so a
burst of finished tasks costs one ``ack/batch`` call, not one call per task,
and a slow ack never holds up a pool thread. Until an outcome is confirmed
its flight stays in the table, so the heartbeat thread keeps its lease alive
while a report is retried, and the claimer counts it against the table's
ceiling (``InFlight.most``). A report is retried while its lease may hold; an
outcome whose lease ran out (by this worker's clock) is given up: the server
reclaims the task and runs it again.

Any exception from one call, expected or not (an answer that is not JSON, a
bug), is logged with the task ids and treated like a transient error: the
completer thread never dies, or nothing would be acked again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

from taskforge_client.client import TaskForgeClient
from taskforge_client.errors import (
    ConnectionFailed,
    LeaseLost,
    NotFound,
    PayloadTooLarge,
    ServerError,
    TaskForgeError,
    Unavailable,
    ValidationError,
)
from taskforge_client.worker.flights import Flight, InFlight
from taskforge_client.worker.logs import EventLog
from taskforge_client.worker.outcome import Outcome
from taskforge_client.worker.summary import Summary

__all__ = ["MAX_BATCH", "SHUTDOWN_ERROR", "Completer"]

MAX_BATCH = 100  # ack/nack batch limit of the protocol
REPORT_ATTEMPTS = 5
SHUTDOWN_ERROR = "worker shutting down"


class Completer:
    """Sends the acks and nacks of finished tasks; ``run()`` is the completer thread."""

    def __init__(
        self,
        client: TaskForgeClient,
        flights: InFlight,
        log: EventLog,
        *,
        worker_id: str,
        tick: float,
        tally: Summary | None = None,
    ) -> None:
        self.client = client
        self.flights = flights
        self.log = log
        self.tally = tally
        self.worker_id = worker_id
        self.tick = tick
        self._outcomes: queue.Queue[Outcome] = queue.Queue()

    def submit(self, outcome: Outcome) -> None:
        """Report this outcome soon (from a pool thread; never blocks)."""
        self._outcomes.put(outcome)

    def run(self, stop: threading.Event) -> None:
        """Report outcomes as they come, in batches, until ``stop`` is set and none is left."""
        while True:
            try:
                batch = [self._outcomes.get(timeout=self.tick)]
            except queue.Empty:
                if stop.is_set():
                    return
                continue
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._outcomes.get_nowait())
                except queue.Empty:
                    break
            for ack in (True, False):
                same = [outcome for outcome in batch if outcome.ack is ack]
                if same:
                    self._report_safely(same)

    def give_back(self, flights: list[Flight], until: float | None = None, *, started: bool) -> None:
        """Nack tasks this worker will not finish, to be retried at once by another worker.

        Tasks never ``started`` are released: the server gives back the attempt their
        claim counted, so a task with ``max_retries`` 0 still gets its one run elsewhere.
        Tasks that ran and were cut off used their attempt, as any failed one.
        ``until`` (monotonic) bounds the calls: the shutdown must end before the
        orchestrator's kill, and an unreturned task is only late (its lease expires).
        """
        for start in range(0, len(flights), MAX_BATCH):
            chunk = flights[start : start + MAX_BATCH]
            left = None if until is None else min(self.client.timeout, until - time.monotonic())
            if left is not None and left <= 0:
                self.log(logging.ERROR, "shutdown.nack_error", "no time left to hand tasks back", count=len(chunk))
                return
            items = [
                Outcome(
                    f, ack=False, error=SHUTDOWN_ERROR, retry=True, retry_after_seconds=0, release=not started
                ).item()
                for f in chunk
            ]
            try:
                results = self.client.nack_batch(self.worker_id, items, timeout=left)
                answers = list(zip(chunk, results, strict=True))
            except Exception as exc:
                self.log(logging.ERROR, "shutdown.nack_error", f"could not hand tasks back: {exc}", count=len(chunk))
                continue
            self._count("handed_back", len(chunk))
            for flight, answer in answers:
                outcome = answer.get("error", {}).get("code") or answer.get("status")
                self.log(logging.WARNING, "task.handed_back", f"{SHUTDOWN_ERROR}: task nacked ({outcome})", flight.job)

    def _report_safely(self, outcomes: list[Outcome]) -> None:
        """``_report``, and should anything still escape it, log it and let the thread go on."""
        try:
            self._report(outcomes)
        except Exception as exc:
            kind = "ack" if outcomes[0].ack else "nack"
            self.log(logging.ERROR, f"{kind}.crash", f"{kind} failed: {exc!r}", task_ids=_ids(outcomes))
            for outcome in outcomes:
                self.flights.forget(outcome.flight)

    def _report(self, outcomes: list[Outcome]) -> None:
        kind = "ack" if outcomes[0].ack else "nack"
        for attempt in range(REPORT_ATTEMPTS):
            if attempt:
                outcomes = self._still_held(outcomes, kind)
                if not outcomes:
                    return
            try:
                if len(outcomes) == 1:
                    self._report_one(outcomes[0])
                else:
                    self._report_batch(outcomes)
                return
            except (ConnectionFailed, Unavailable, ServerError) as exc:
                # The heartbeat thread keeps these leases alive while we retry; a
                # repeated ack is answered 200 and a repeated nack lease_lost, so a
                # 500 (which may have come after the commit) is retried too.
                self.log(logging.WARNING, f"{kind}.retry", f"{kind} failed, retrying: {exc}", count=len(outcomes))
                time.sleep(min(8.0, 0.5 * 2**attempt))
            except TaskForgeError as exc:
                self.log(logging.ERROR, f"{kind}.error", f"{kind} refused: {exc}", count=len(outcomes))
                break
            except Exception as exc:
                # Not an answer the client knows (or a bug): like a transient error, but
                # name the tasks, and judge each alone in case one of them is the cause.
                message = f"{kind} failed unexpectedly, retrying: {exc!r}"
                self.log(logging.ERROR, f"{kind}.retry", message, count=len(outcomes), task_ids=_ids(outcomes))
                if len(outcomes) > 1:
                    for outcome in outcomes:
                        self._report_safely([outcome])
                    return
                time.sleep(min(8.0, 0.5 * 2**attempt))
        else:
            self.log(
                logging.ERROR,
                f"{kind}.gave_up",
                f"could not {kind}; the leases will expire and the tasks run again",
                count=len(outcomes),
            )
        for outcome in outcomes:
            self.flights.forget(outcome.flight)

    def _still_held(self, outcomes: list[Outcome], kind: str) -> list[Outcome]:
        """The outcomes still worth retrying: not lost, and their lease not run out by our clock."""
        now = time.monotonic()
        kept = []
        for outcome in outcomes:
            flight = outcome.flight
            if flight.lost or flight.lease_left(now) <= 0:
                self._count("lost")
                message = f"{kind} not confirmed before the lease ran out: the task will run again"
                self.log(logging.WARNING, f"{kind}.gave_up", message, flight.job)
                self.flights.forget(flight)
            else:
                kept.append(outcome)
        return kept

    def _report_one(self, outcome: Outcome) -> None:
        job = outcome.flight.job
        try:
            if outcome.ack:
                answer = self.client.ack(job.worker_id, job.id, job.lease_token, outcome.result)
            else:
                answer = self.client.nack(
                    job.worker_id,
                    job.id,
                    outcome.error,
                    job.lease_token,
                    retry=outcome.retry,
                    retry_after_seconds=outcome.retry_after_seconds,
                )
        except (LeaseLost, NotFound) as exc:
            self._lease_lost_on_report(outcome, exc.code)
        except (ValidationError, PayloadTooLarge) as exc:
            if not outcome.ack:
                raise
            # The result itself was refused (too big, say): the attempt failed.
            self._report_one(Outcome(outcome.flight, ack=False, error=f"result refused by TaskForge: {exc}"))
            return
        else:
            kind = "ack" if outcome.ack else "nack"
            self._count(_confirmed_as(outcome, answer))
            self.log(logging.DEBUG, f"task.{kind}ed", f"{kind} confirmed", job)
        self.flights.forget(outcome.flight)

    def _report_batch(self, outcomes: list[Outcome]) -> None:
        items = [outcome.item() for outcome in outcomes]
        try:
            if outcomes[0].ack:
                results = self.client.ack_batch(self.worker_id, items)
            else:
                results = self.client.nack_batch(self.worker_id, items)
        except (ValidationError, PayloadTooLarge):
            # One bad item refuses the whole batch: judge each alone.
            for outcome in outcomes:
                self._report_one(outcome)
            return
        kind = "ack" if outcomes[0].ack else "nack"
        self.log(logging.DEBUG, f"{kind}.batch", f"{kind} batch of {len(outcomes)} sent", count=len(outcomes))
        for outcome, answer in zip(outcomes, results, strict=True):
            error = answer.get("error")
            if error:
                self._lease_lost_on_report(outcome, error.get("code", "error"))
            else:
                self._count(_confirmed_as(outcome, answer))
                self.log(logging.DEBUG, f"task.{kind}ed", f"{kind} confirmed", outcome.flight.job, batch=len(outcomes))
            self.flights.forget(outcome.flight)

    def _count(self, outcome: str, n: int = 1) -> None:
        if self.tally is not None:
            self.tally.count(outcome, n)

    def _lease_lost_on_report(self, outcome: Outcome, code: str) -> None:
        self._count("lost")
        self.log(
            logging.WARNING,
            "task.lease_lost",
            f"{'ack' if outcome.ack else 'nack'} answered {code}: the task is no longer ours, dropped",
            outcome.flight.job,
        )
        self.flights.forget(outcome.flight)


def _ids(outcomes: list[Outcome]) -> list[str]:
    return [outcome.flight.job.id for outcome in outcomes]


def _confirmed_as(outcome: Outcome, answer: Mapping[str, Any] | None) -> str:
    """What a confirmed report did to the task: ``done``, ``retried`` or ``dead``."""
    if outcome.ack:
        return "done"
    return "dead" if answer and answer.get("status") == "dead" else "retried"
