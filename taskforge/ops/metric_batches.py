"""Request metrics written to their shared files in batches: at once after a quiet spell, else every 0.1 s.

Each request moves sixteen values of django-prometheus' request metrics
(seven counters and three histograms, an observation being a sum and a
bucket). With ``PROMETHEUS_MULTIPROC_DIR`` set (every API process under
gunicorn) each move is a write to the process's memory-mapped file, behind
prometheus_client's lock and a check of the process id: 17 of the 30 µs
one request's metrics took (20,000 requests' metrics in a row, one
process). A series wrapped by :func:`defer_writes` adds each move to an
amount of its own instead, and the amounts reach prometheus_client's values
together (one write per series moved, however many requests moved it):

* at once, when a request's metrics are done (:func:`settle`) and this
  process wrote none in the last ``WINDOW_SECONDS``: a lone request is on
  ``/metrics`` by the time its answer has left;
* otherwise by a writer thread at the end of that window
  (``taskforge.infra.write_window``, as the task counters are);
* before this process renders ``/metrics`` (:func:`write_pending`), and at exit.

So a scrape answered by another process of the same server may miss this
process's last ``WINDOW_SECONDS`` of requests, as it may miss its last task
moves (``queues.telemetry.counters`` batches the same way), and a process
killed outright loses what it had not written (one window's requests at
most). Values kept in memory (no ``PROMETHEUS_MULTIPROC_DIR``: tests,
``runserver``) cost little to move and are left as they are.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from taskforge.infra.write_window import WINDOW_SECONDS, WriteWindow

_lock = threading.Lock()  # guards the pending amounts and the queue of values to write
_writing = threading.Lock()  # held for a whole write: after write_pending(), the files hold every move
_queued: list[_Deferred] = []


def _write_at_window_end() -> None:
    global _woken
    _woken = False  # before the write: a move made during it wakes the thread again
    write_pending()


_window = WriteWindow(WINDOW_SECONDS, _write_at_window_end, thread_name="request-metrics-writer")
_woken = False  # the window's thread has been told to write and has not begun yet


class _Deferred:
    """Stands in for one prometheus_client value: a move waits in ``pending`` until the next write."""

    __slots__ = ("pending", "queued", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self.pending = 0.0
        self.queued = False

    def inc(self, amount: float) -> None:
        with _lock:
            self.pending += amount
            if not self.queued:
                self.queued = True
                _queued.append(self)

    def set(self, value: float, timestamp: float | None = None) -> None:
        with _lock:
            self.pending = 0.0  # a reset drops what was added before it
            self.value.set(value, timestamp)

    def get(self) -> float:
        with _lock:
            return float(self.value.get()) + self.pending

    def __getattr__(self, name: str) -> Any:  # exemplars, which multiprocess values ignore
        return getattr(self.value, name)


def _deferrable(value: Any) -> bool:
    return bool(getattr(value, "_multiprocess", False)) and not isinstance(value, _Deferred)


def defer_writes[S](series: S) -> S:
    """``series`` (a counter's or histogram's child, or an unlabelled metric), its file writes deferred.

    Only values written to the shared files are deferred; calling it again changes nothing.
    """
    owned: Any = series
    for name in ("_value", "_sum", "_count"):
        value = getattr(owned, name, None)
        if _deferrable(value):
            setattr(owned, name, _Deferred(value))
    buckets = getattr(owned, "_buckets", None)
    if buckets:
        owned._buckets = [_Deferred(bucket) if _deferrable(bucket) else bucket for bucket in buckets]
    return series


def settle() -> None:
    """A request's metrics are all moved: write them now after a quiet spell, else by the window's end."""
    global _woken
    if not _queued:
        return
    if not _window.open():
        write_pending()
    elif not _woken:
        _woken = True
        _window.write_at_end()


def write_pending() -> None:
    """Write every pending move to prometheus_client's values (this process's files)."""
    with _writing:
        with _lock:
            batch = [(deferred, deferred.pending) for deferred in _queued]
            for deferred in _queued:
                deferred.pending = 0.0
                deferred.queued = False
            _queued.clear()
            _window.wrote()
        for deferred, amount in batch:
            deferred.value.inc(amount)


def _forget_in_child() -> None:
    # A forked child starts with its parent's pending moves, which are the parent's to write; its
    # locks may have been held by a parent's thread that does not exist here.
    global _lock, _writing, _woken
    _lock, _writing = threading.Lock(), threading.Lock()
    for deferred in _queued:
        deferred.pending = 0.0
        deferred.queued = False
    _queued.clear()
    _woken = False


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(write_pending)
