"""The base of TaskForge's background loops (scheduler, dispatcher, watchdog).

A loop is a management command whose ``tick()`` does one unit of work and
returns how much it did. This base owns the rest:

* SIGTERM/SIGINT set a flag; the loop finishes the tick in hand and exits 0.
* It sleeps in short slices, so shutdown is prompt even with long intervals.
* A tick that did a full batch runs again at once instead of sleeping.
* Database connections are checked every iteration, so a Postgres restart
  heals without restarting the process.
* An exception is logged and backed off (up to 30 s), never fatal.
* ``--once`` runs a single tick (for tests and cron-style use).
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections, connection

SLEEP_SLICE_SECONDS = 0.1
MAX_ERROR_BACKOFF_SECONDS = 30.0
# A tick slower than this is worth a warning: Postgres or Redis is struggling, or a batch is too big.
SLOW_TICK_SECONDS = 2.0


class LoopCommand(BaseCommand):
    #: seconds between ticks when there is nothing more to do
    interval: float = 1.0
    #: name used in log lines
    loop_name: str = "loop"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="run one tick and exit")

    def tick(self) -> int:
        """Do one unit of work; return how many items were handled."""
        raise NotImplementedError

    def more_work_pending(self, handled: int) -> bool:
        """Whether to tick again at once (a full batch suggests more is waiting)."""
        return False

    @property
    def logger(self) -> logging.Logger:
        # A property, not set in handle(): tests call tick() directly, and ticks log too.
        return logging.getLogger(f"taskforge.loops.{self.loop_name}")

    def handle(self, *args: Any, **options: Any) -> None:
        if options.get("once"):
            self.tick()
            return
        self.stopping = False
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        self.logger.info("%s started", self.loop_name, extra={"event": "loop.start", "loop": self.loop_name})
        errors = 0
        while not self.stopping:
            self._fresh_connections()
            started = time.monotonic()
            try:
                handled = self.tick()
            except Exception:
                errors += 1
                backoff = min(MAX_ERROR_BACKOFF_SECONDS, 0.5 * 2**errors)
                self.logger.exception(
                    "%s tick failed; retrying in %.1fs",
                    self.loop_name,
                    backoff,
                    extra={"event": "loop.error", "loop": self.loop_name},
                )
                self._close_connection()
                self._sleep(backoff)
                continue
            self._report_tick(handled, time.monotonic() - started, errors)
            errors = 0
            if not self.more_work_pending(handled):
                self._sleep(self.interval)
        self.logger.info("%s stopped", self.loop_name, extra={"event": "loop.stop", "loop": self.loop_name})

    def _report_tick(self, handled: int, seconds: float, failed_before: int) -> None:
        """The tick's work at debug; what an operator should notice at warning."""
        fields = {"loop": self.loop_name, "handled": handled, "duration_ms": round(seconds * 1000, 1)}
        if failed_before:
            self.logger.warning(
                "%s recovered after %d failed tick(s)",
                self.loop_name,
                failed_before,
                extra={"event": "loop.recovered", "failed_ticks": failed_before, **fields},
            )
        if seconds > SLOW_TICK_SECONDS:
            self.logger.warning(
                "%s tick took %.1fs (handled %d)",
                self.loop_name,
                seconds,
                handled,
                extra={"event": "loop.slow_tick", **fields},
            )
        elif handled:
            self.logger.debug("%s handled %d", self.loop_name, handled, extra={"event": "loop.tick", **fields})

    def _stop(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(SLEEP_SLICE_SECONDS, remaining))

    def _fresh_connections(self) -> None:
        # Inside a test's atomic block this would close the test's own connection.
        if not connection.in_atomic_block:
            close_old_connections()

    def _close_connection(self) -> None:
        if not connection.in_atomic_block:
            connection.close()
