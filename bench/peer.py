"""What W0 and W8 ask of each peer queue (Celery, Huey, PgQueuer), and the two runs they share.

Every peer's no-op task counts itself in Redis (``bench:done``) when its
handler runs, so "tasks done" means the same thing for each of them. A peer
whose packages are not installed in the harness's virtualenv is not measured;
its figures say why.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass
from typing import Protocol

from bench import sequential
from bench.procs import Child, Supervisor

READY_TIMEOUT_SECONDS = 60.0


class CountingPeer(Protocol):
    name: str

    def reset(self) -> None:
        """Empty the peer's queue and its done-counter (no worker may be running)."""

    def enqueue(self) -> None:
        """One no-op task, enqueued the way the peer's documentation shows."""

    def start_workers(self) -> list[Child]:
        """The peer's worker processes, as W8 and the issue specify them."""

    def done(self) -> int:
        """How many no-op tasks have run so far."""


def missing(*packages: str) -> str | None:
    """Why a peer cannot be measured here (its packages are absent), or None."""
    absent = [name for name in packages if importlib.util.find_spec(name) is None]
    if absent:
        return f"{', '.join(absent)} not installed in the bench virtualenv (requirements-bench.in)"
    return None


def enqueue_window(peer: CountingPeer, seconds: float) -> sequential.Window:
    """W0: one producer enqueues back to back, nobody drains; the queue is emptied afterwards."""
    peer.reset()
    try:
        return sequential.run(peer.enqueue, seconds)
    finally:
        peer.reset()


@dataclass
class Trickle:
    producer: sequential.Window
    done_in_window: int

    @property
    def rate(self) -> float:
        """Tasks whose handler ran during the producer's window, per second of it."""
        return self.done_in_window / self.producer.seconds if self.producer.seconds > 0 else 0.0


def trickle(peer: CountingPeer, supervisor: Supervisor, seconds: float, drain_timeout: float) -> Trickle:
    """W8: workers drain while one producer enqueues one by one; then every task must run exactly once."""
    peer.reset()
    workers = peer.start_workers()
    try:
        peer.enqueue()  # the workers are up and idle once this one has run
        wait_done(peer, 1, workers, READY_TIMEOUT_SECONDS)
        at_start: list[int] = []
        window = sequential.run(peer.enqueue, seconds, on_window_start=lambda: at_start.append(peer.done()))
        done_in_window = peer.done() - at_start[0]
        expected = window.total_calls + 1
        wait_done(peer, expected, workers, drain_timeout)
        time.sleep(0.5)  # a task run twice would show up as one too many
        if peer.done() != expected:
            raise RuntimeError(f"{peer.name} ran {peer.done()} tasks for {expected} enqueued")
        return Trickle(window, done_in_window)
    finally:
        for child in workers:
            supervisor.stop(child, grace=10)
        peer.reset()


def wait_done(peer: CountingPeer, count: int, workers: list[Child], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while peer.done() < count:
        for child in workers:
            if not child.alive():
                raise RuntimeError(f"{peer.name} worker {child.name} exited:\n{child.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{peer.name} ran {peer.done()} of {count} tasks in {timeout:.0f}s")
        time.sleep(0.01)
