"""Writes batched by time: at once after a quiet window, otherwise by a thread at the window's end.

An API process writes two things on nearly every call: the task counters
(``queues.telemetry.counters``, to Redis) and the request metrics
(``taskforge.ops.metric_batches``, to prometheus_client's shared files).
Both keep what a call moved and write it the same way: a process that wrote
nothing in the last window writes at once (so an idle process's first move is
visible as soon as the call ends), and one that did leaves the move to a
thread of its own, which writes everything waiting when the window ends. A
busy process thus writes once a window, not once a call.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("taskforge.metrics")

#: How long a busy process gathers moves before it writes them. Every write is a wake-up of the
#: writer thread and its round trip or file writes (336-393 µs a task-counter write under load): at
#: 20 ms the two writers took 87 µs of each single enqueue's CPU, at 0.1 s 16 µs (``python -m
#: bench.phases``, 4,000 in a row; docs/performance.md). A tenth of a second is still far inside any
#: scrape interval, and a process killed outright loses at most this much of its metrics (never a task).
WINDOW_SECONDS = 0.1


class WriteWindow:
    """When this process last wrote, and the thread that writes at the end of a window.

    ``write`` writes whatever waits (the owner keeps it, and calls :meth:`wrote`
    as a write begins); it runs on the thread, and an exception it raises is
    logged and the thread goes on.
    """

    def __init__(self, seconds: float, write: Callable[[], object], *, thread_name: str) -> None:
        self.seconds = seconds
        self.written_at = -math.inf  # time.monotonic() of the last write
        self._write = write
        self._thread_name = thread_name
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._wake = threading.Event()

    def open(self) -> bool:
        """Whether this process wrote less than a window ago: a move now waits for the window's end."""
        return time.monotonic() - self.written_at < self.seconds

    def wrote(self) -> None:
        self.written_at = time.monotonic()

    def forget(self) -> None:
        """The next move is written at once, as after a quiet spell."""
        self.written_at = -math.inf

    def write_at_end(self) -> None:
        """Have the thread write what waits when the window ends (started on first use, and again after a fork)."""
        if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
            self._pid = os.getpid()  # a forked child starts its own: threads do not survive fork
            self._wake = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(self._wake,), name=self._thread_name, daemon=True)
            self._thread.start()
        self._wake.set()

    def _run(self, wake: threading.Event) -> None:
        while True:
            wake.wait()
            wake.clear()
            delay = self.written_at + self.seconds - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            try:
                self._write()
            except Exception:  # never lose the thread: the next move wakes it again
                logger.exception("writing metrics failed", extra={"event": "metrics.error"})
