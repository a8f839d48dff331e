"""The pusher: claims the due tasks of push queues and delivers each one over HTTP.

Each delivery is an attempt under a lease, exactly as for a worker: the pusher claims through
``queues.dispatch.claiming`` (pause, rate limits, priorities and ``scheduled_at`` as for pulled
tasks), heartbeats the lease while the request is in flight, and records the outcome with the
lifecycle's ``ack_many`` / ``nack_many`` under that lease. A pusher that dies mid-delivery
stops heartbeating; its leases lapse and the watchdog retries the tasks, so nothing accepted is
lost (a receiver may see a delivery again: at least once). Several pushers may run at once:
Postgres decides every claim, Redis counts every queue's ``max_concurrent``
(``queues.push.semaphore``).

Threads: the database is used only by the calling thread (``run_once``); the HTTP requests run
on an event loop in one background thread, which hands finished answers back through a
thread-safe queue, so a slow receiver never holds a database connection.

Batches: nothing on the calling thread is paid per delivery. A pass waits until about half of
what is in flight has answered (``wait``), then records every answer in one ``ack_many`` and
one ``nack_many``, hands their semaphore slots back in the same Redis call that takes the next
ones, claims up to the room it has in one claim per queue, and starts the new deliveries with
one hand-off to the event loop.

Wake-ups: a pass with nothing in flight sleeps until an answer comes back or a push queue's
doorbell rings (``queues.push.bells``, heard on the event loop): a task enqueued or
coming due is claimed within milliseconds, not at the next timed pass.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import queue as thread_queue
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import redis
from django.conf import settings
from django.db.models.functions import Now

from queues import lifecycle
from queues.dispatch import claiming, lanes
from queues.errors import LeaseLost, TaskNotFound
from queues.models import Queue
from queues.push import outcomes, secrets, semaphore
from queues.push.bells import PushBells
from queues.push.delivery import Answer, Deliverer, Delivery
from queues.telemetry import push_metrics

logger = logging.getLogger("taskforge.loops.pusher")

#: How often the push queues' settings are re-read (a PATCH or rotation takes effect within it).
QUEUES_REFRESH_SECONDS = 1.0
#: How often held semaphore slots are renewed (below semaphore.SETTLE_MS).
RENEW_SECONDS = 1.0
#: A queue whose claim found nothing is asked again after this long, or as soon as its Redis
#: lane holds ids (an enqueue, a due retry or the dispatcher put them there).
EMPTY_QUEUE_BACKOFF_SECONDS = 1.0
#: Redis trouble is logged at most this often (a pass runs several times a second).
REDIS_WARNING_EVERY_SECONDS = 30.0
#: Most tasks claimed from one queue in one pass.
CLAIM_BATCH = 100
#: Deliveries still in flight at shutdown get this long to finish before they are failed.
SHUTDOWN_GRACE_SECONDS = 10.0
#: Once one answer is back, a pass waits at most this long for half of what is in flight to
#: answer too (its statements and Redis calls are then paid once per batch, not per delivery).
GATHER_SECONDS = 0.02
#: A pass starts once this many answers wait, whatever is still in flight.
RECORD_BATCH = 200


def default_worker_id() -> str:
    return f"pusher-{socket.gethostname()}-{os.getpid()}"


@dataclass
class PushQueue:
    """What a pass needs of a push queue, read from its row."""

    queue: Queue
    secrets: list[str]

    @property
    def push(self) -> dict[str, Any]:
        push: dict[str, Any] | None = self.queue.push
        assert push is not None
        return push


@dataclass
class InFlight:
    task_id: uuid.UUID
    queue_name: str
    lease_token: str
    slot: str
    heartbeat_due: float


@dataclass
class Pass:
    """What one ``run_once`` did."""

    started: int = 0
    recorded: int = 0
    heartbeats: int = 0

    @property
    def handled(self) -> int:
        return self.started + self.recorded


@dataclass
class Pusher:
    worker_id: str = field(default_factory=default_worker_id)
    concurrency: int = field(default_factory=lambda: settings.TASKFORGE_PUSHER_CONCURRENCY)
    allow_private: bool = field(default_factory=lambda: settings.TASKFORGE_PUSH_ALLOW_PRIVATE)

    def __post_init__(self) -> None:
        self.in_flight: dict[uuid.UUID, InFlight] = {}
        # Filled on the event loop as answers come back, drained by record_finished.
        self.finished: thread_queue.SimpleQueue[tuple[uuid.UUID, Answer]] = thread_queue.SimpleQueue()
        self.wake = threading.Event()
        # How many waiting answers set ``wake`` (see wait); read on the event loop.
        self._wake_at = 1
        self.bells = PushBells(self.wake, CLAIM_BATCH)
        # The event loop's own: the running delivery of each task, for cancelling at shutdown.
        self._running: dict[uuid.UUID, asyncio.Task[Answer]] = {}
        # Slots of recorded deliveries, handed back with the queue's next take (or at the pass' end).
        self._freed: dict[str, list[str]] = {}
        self._queues: list[PushQueue] = []
        self._queues_read_at = -float("inf")
        self._renewed_at = time.monotonic()
        self._empty_until: dict[uuid.UUID, float] = {}
        self._turn = 0
        self._rate_limited_until: dict[uuid.UUID, float] = {}
        self._redis_warned_at = -float("inf")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pusher-http", daemon=True)
        self._thread.start()
        self._deliverer = Deliverer(max_connections=self.concurrency, allow_private=self.allow_private)
        self._listening = asyncio.run_coroutine_threadsafe(self.bells.listen(), self._loop)

    # --- one pass ---------------------------------------------------------------------------

    def run_once(self) -> Pass:
        """1. Record the answers that came back. 2. Keep the leases and slots held alive.
        3. Start deliveries of due tasks, as far as each queue's free slots allow.
        4. Release the recorded deliveries' slots that step 3 did not hand back already."""
        done = Pass()
        done.recorded = self.record_finished()
        done.heartbeats = self.keep_alive()
        done.started = self.start_deliveries()
        self._release_freed()
        return done

    def wait(self, seconds: float) -> None:
        """Sleep until answers are worth a pass, or ``seconds`` pass with none.

        1. Until the first answer comes back (at most ``seconds``).
        2. Then at most ``GATHER_SECONDS`` more, until half of what is in flight (at most
           ``RECORD_BATCH``) has answered: against a receiver that answers at once, a pass
           that ran as soon as one answer was back would record and refill one delivery at a
           time, paying its statements and Redis calls for each.

        A doorbell of a push queue ends either wait: new tasks are started at once.
        """
        self._wait_for(1, seconds)
        self._wait_for(min(RECORD_BATCH, max(1, len(self.in_flight) // 2)), GATHER_SECONDS)
        self._wake_at = 1

    def _wait_for(self, answers: int, seconds: float) -> None:
        if self.finished.qsize() >= answers or self.bells.pending():
            return
        self._wake_at = answers
        self.wake.clear()
        # An answer or a bell that came between the check and the clear.
        if self.finished.qsize() < answers and not self.bells.pending():
            self.wake.wait(seconds)

    def push_queues(self) -> list[PushQueue]:
        now = time.monotonic()
        if now - self._queues_read_at >= QUEUES_REFRESH_SECONDS:
            rows = list(Queue.objects.filter(push__isnull=False).annotate(db_now=Now()))
            self._queues = [
                PushQueue(
                    q,
                    secrets.signing_secrets(
                        q.push_secret or "",
                        q.push_previous_secret,
                        q.push_secret_rotated_at,
                        q.db_now,
                    ),
                )
                for q in rows
                if q.push_secret
            ]
            self._queues_read_at = now
            self.bells.names = tuple(sorted(q.queue.name for q in self._queues))
        return self._queues

    def start_deliveries(self) -> int:
        starting: list[tuple[uuid.UUID, Delivery]] = []
        now = time.monotonic()
        queues = self.push_queues()
        self._forget_empty_where_rung(queues)
        if len(self.in_flight) >= self.concurrency:
            return 0  # no room: the next pass with room starts with the queue whose turn it is
        # Each pass with room starts with the next queue, so one busy queue cannot keep this
        # pusher's concurrency to itself pass after pass.
        self._turn += 1
        first = self._turn % len(queues) if queues else 0
        for push_queue in queues[first:] + queues[:first]:
            queue = push_queue.queue
            room = min(self.concurrency - len(self.in_flight), CLAIM_BATCH, push_queue.push["max_concurrent"])
            if room <= 0:
                break
            if queue.paused or self._rate_limited_until.get(queue.id, 0.0) > now:
                continue
            if self._empty_until.get(queue.id, 0.0) > now and not self._lane_holds_ids(queue.name):
                continue
            try:
                slots = semaphore.take(
                    queue.name,
                    room,
                    limit=push_queue.push["max_concurrent"],
                    ttl_ms=self._lease_ms(),
                    releasing=self._freed.get(queue.name, ()),
                )
            except redis.RedisError as exc:
                self._redis_trouble(f"push queue {queue.name} delivers nothing new", exc)
                continue
            self._freed.pop(queue.name, None)
            if not slots:
                continue
            if not Queue.objects.filter(id=queue.id, paused=False, push__isnull=False).exists():
                # Paused, or back to pull, since the settings were read: that takes effect at once.
                self._release(queue.name, slots)
                continue
            try:
                claimed = claiming.claim(self.worker_id, queue, len(slots))
            except Exception:
                self._release(queue.name, slots)
                raise
            rows = claimed.rows
            if claimed.retry_after:
                # Out of rate-limit tokens: the lane's ids stay where they are until the next one.
                self._rate_limited_until[queue.id] = now + claimed.retry_after
            unused = slots[len(rows) :]
            if unused:
                self._release(queue.name, unused)
            if not rows:
                self._empty_until[queue.id] = now + EMPTY_QUEUE_BACKOFF_SECONDS
            for row, slot in zip(rows, slots, strict=False):
                starting.append((row["id"], self._in_flight(push_queue, row, slot)))
        if starting:
            # One wake-up of the event loop for the whole batch, not one per delivery.
            self._loop.call_soon_threadsafe(self._launch, starting)
        return len(starting)

    def _forget_empty_where_rung(self, queues: list[PushQueue]) -> None:
        """A queue whose doorbell rang is claimed from again, even within its empty backoff."""
        rung = self.bells.take()
        for push_queue in queues:
            if push_queue.queue.name in rung:
                self._empty_until.pop(push_queue.queue.id, None)

    def _in_flight(self, push_queue: PushQueue, row: dict[str, Any], slot: str) -> Delivery:
        """Hold the claimed task as in flight; what its delivery sends."""
        push = push_queue.push
        self.in_flight[row["id"]] = InFlight(
            row["id"], push_queue.queue.name, row["lease_token"], slot, time.monotonic() + self._heartbeat_every()
        )
        return Delivery(
            task_id=str(row["id"]),
            queue=push_queue.queue.name,
            attempt=row["attempts"],
            kind=row["kind"],
            payload=row["payload"],
            url=push["url"],
            timeout_seconds=push["timeout_seconds"],
            headers=push.get("headers") or {},
            secrets=push_queue.secrets,
        )

    def _launch(self, starting: list[tuple[uuid.UUID, Delivery]]) -> None:
        """On the event loop: start a batch of deliveries."""
        for task_id, delivery in starting:
            running = self._loop.create_task(self._deliverer.deliver(delivery))
            self._running[task_id] = running
            running.add_done_callback(functools.partial(self._answered, task_id))

    def _answered(self, task_id: uuid.UUID, running: asyncio.Task[Answer]) -> None:
        """On the event loop: hand the answer over; wake the pass once enough are waiting."""
        self._running.pop(task_id, None)
        self.finished.put((task_id, _answer_of(running)))
        if self.finished.qsize() >= self._wake_at:
            self.wake.set()

    def record_finished(self) -> int:
        """Ack or fail every delivery that has its answer, in one statement each, under its lease."""
        ended: list[tuple[InFlight, Answer]] = []
        while True:
            try:
                task_id, answer = self.finished.get_nowait()
            except thread_queue.Empty:
                break
            flight = self.in_flight.pop(task_id, None)
            if flight is not None:
                ended.append((flight, answer))
        if not ended:
            return 0
        acks: list[lifecycle.AckItem] = []
        nacks: list[lifecycle.NackItem] = []
        for flight, answer in ended:
            decided = outcomes.outcome(answer)
            if isinstance(decided, outcomes.Succeeded):
                acks.append(lifecycle.AckItem(flight.task_id, flight.lease_token, decided.result))
            else:
                nacks.append(
                    lifecycle.NackItem(
                        flight.task_id,
                        decided.error,
                        flight.lease_token,
                        retry_after_seconds=decided.retry_after_seconds,
                    )
                )
        try:
            results = (lifecycle.ack_many(self.worker_id, acks) if acks else []) + (
                lifecycle.nack_many(self.worker_id, nacks) if nacks else []
            )
        except Exception:
            # Postgres unreachable, say: keep the answers for the next pass instead of letting the
            # leases lapse (which would deliver every one of them again).
            for flight, answer in ended:
                self.in_flight[flight.task_id] = flight
                self.finished.put((flight.task_id, answer))
            raise
        push_metrics.delivered(
            (flight.queue_name, outcomes.metric_label(answer), answer.seconds) for flight, answer in ended
        )
        task_ids = [item.task_id for item in acks] + [item.task_id for item in nacks]
        for task_id, result in zip(task_ids, results, strict=True):
            if isinstance(result, (LeaseLost, TaskNotFound)):
                # The watchdog reclaimed it (this pusher stalled past the lease): that attempt is
                # already a failed one and the task is retried; this answer is not recorded.
                logger.warning("delivery of task %s answered after its lease was lost", task_id,
                               extra={"event": "pusher.lease_lost", "task_id": str(task_id)})  # fmt: skip
        for flight, _ in ended:
            self._freed.setdefault(flight.queue_name, []).append(flight.slot)
        return len(ended)

    def keep_alive(self) -> int:
        """Heartbeat the leases of long deliveries; renew the slots held, about every second."""
        now = time.monotonic()
        beats = 0
        for flight in list(self.in_flight.values()):
            if flight.heartbeat_due > now:
                continue
            flight.heartbeat_due = now + self._heartbeat_every()
            try:
                lifecycle.heartbeat(flight.task_id, worker_id=self.worker_id, lease_token=flight.lease_token)
                beats += 1
            except (LeaseLost, TaskNotFound):
                logger.warning("lease of task %s lost during its delivery", flight.task_id,
                               extra={"event": "pusher.lease_lost", "task_id": str(flight.task_id)})  # fmt: skip
        if now - self._renewed_at >= RENEW_SECONDS:
            self._renewed_at = now
            held: dict[str, list[str]] = {}
            for flight in self.in_flight.values():
                held.setdefault(flight.queue_name, []).append(flight.slot)
            for name, slots in held.items():
                try:
                    semaphore.renew(name, slots, ttl_ms=self._lease_ms())
                except redis.RedisError as exc:
                    self._redis_trouble("push slots not renewed", exc)
        return beats

    # --- shutdown ---------------------------------------------------------------------------

    def close(self, grace: float = SHUTDOWN_GRACE_SECONDS) -> None:
        """Let deliveries in flight finish (up to ``grace``) and record them; fail the rest."""
        deadline = time.monotonic() + grace
        while self.in_flight and time.monotonic() < deadline:
            self.record_finished()
            self.keep_alive()
            self.wait(0.1)
        # Each cancelled delivery answers "interrupted" (a failed attempt) before this returns.
        asyncio.run_coroutine_threadsafe(self._cancel_running(), self._loop).result(timeout=5)
        self.record_finished()
        self._release_freed()
        asyncio.run_coroutine_threadsafe(self._deliverer.close(), self._loop).result(timeout=5)
        asyncio.run_coroutine_threadsafe(self._stop_listening(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def _stop_listening(self) -> None:
        self._listening.cancel()
        await self.bells.close()

    async def _cancel_running(self) -> None:
        running = list(self._running.values())
        for delivery in running:
            delivery.cancel()
        # Their done callbacks (_answered) were added first, so they have run when this returns.
        await asyncio.gather(*running, return_exceptions=True)

    # --- helpers ----------------------------------------------------------------------------

    def _release_freed(self) -> None:
        freed, self._freed = self._freed, {}
        for name, slots in freed.items():
            self._release(name, slots)

    def _release(self, queue_name: str, slots: list[str]) -> None:
        try:
            semaphore.release(queue_name, slots)
        except redis.RedisError as exc:
            # Unreleased slots lapse with their lease time; the queue is only slower meanwhile.
            self._redis_trouble("push slots not released", exc)

    def _lane_holds_ids(self, queue_name: str) -> bool:
        try:
            return lanes.sizes([queue_name])[0] > 0
        except redis.RedisError:
            return False  # the next Postgres check comes with the backoff

    def _redis_trouble(self, what: str, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._redis_warned_at >= REDIS_WARNING_EVERY_SECONDS:
            self._redis_warned_at = now
            logger.warning("redis unavailable: %s: %s", what, exc, extra={"event": "pusher.redis_down"})

    @staticmethod
    def _lease_ms() -> int:
        return int(settings.TASKFORGE_HEARTBEAT_TIMEOUT * 1000)

    @staticmethod
    def _heartbeat_every() -> float:
        return settings.TASKFORGE_HEARTBEAT_TIMEOUT / 3


def _answer_of(future: asyncio.Future[Answer]) -> Answer:
    """The delivery's answer; a cancelled or crashed delivery is a failed attempt that says so."""
    if future.cancelled():
        return Answer("connection_error", 0.0, error="delivery interrupted: the pusher stopped")
    exc = future.exception()
    if exc is not None:
        logger.error("delivery crashed", exc_info=exc, extra={"event": "pusher.delivery_crashed"})
        return Answer("connection_error", 0.0, error=f"delivery failed: {type(exc).__name__}: {exc}")
    return future.result()
