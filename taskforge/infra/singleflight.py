"""One computation shared by the callers that arrive while it runs (a "single flight").

``/metrics`` is open by default (the contract) and counts queue depth in
Postgres when scraped. However many scrapes arrive at once, each API process
then runs one depth query at a time: a caller that finds one running waits for
it and gets its result. A caller that finds none starts a fresh one, so a
sequential client always sees what was committed before it asked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

__all__ = ["SingleFlight"]


class SingleFlight[T]:
    """``flight()`` runs ``compute`` unless a run is under way; then it waits for that run's result."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute = compute
        self._lock = threading.Lock()
        self._running: Future[T] | None = None

    def __call__(self) -> T:
        with self._lock:
            running = self._running
            if running is None:
                mine: Future[T] = Future()
                self._running = mine
        if running is not None:
            return running.result()  # the running computation's result, or its exception
        try:
            result = self._compute()
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._running = None
        mine.set_result(result)
        return result
