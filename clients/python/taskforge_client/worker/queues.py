"""Which queue each claim asks, and how long it waits: one queue, any queue, or an app's queues in turn.

The claim contract names one queue or none, and none means every unpaused
queue, tasks of other applications included. A worker started on an app
module must take only its own tasks, so it claims from each queue its
tasks use, in the app's order (the queue of the most urgent task first):

* after a claim that brought tasks, the next starts again at the first queue,
  so a busy urgent queue is always asked first;
* a claim that brought none moves on to the next queue without waiting
  (``wait_seconds`` 0), so one empty queue never delays the others;
* once a whole round came back empty, each claim long-polls its queue for a
  share of ``wait_seconds`` (at least 1 s), so an idle worker waits on the
  server instead of polling, and still looks at every queue within about
  ``wait_seconds``.

With one queue (or none) every claim long-polls it for ``wait_seconds``, as
the worker always did.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ClaimQueues"]


class ClaimQueues:
    """The queue and long-poll wait of the next claim; ``claimed()`` says how the last one went."""

    def __init__(self, queues: Sequence[str | None], wait_seconds: int) -> None:
        if not queues:
            raise ValueError("a worker needs at least one queue to claim from (or None for any)")
        self.queues = list(queues)
        self.wait_seconds = wait_seconds
        self._next = 0
        self._empty_in_a_row = 0

    def next(self) -> tuple[str | None, int]:
        """``(queue, wait_seconds)`` for the next claim."""
        queue = self.queues[self._next]
        if len(self.queues) == 1:
            return queue, self.wait_seconds
        if self._empty_in_a_row < len(self.queues) or not self.wait_seconds:
            return queue, 0
        return queue, max(1, self.wait_seconds // len(self.queues))

    def claimed(self, got_tasks: bool) -> None:
        """Record the last claim's answer: start again at the first queue, or move on."""
        if got_tasks:
            self._next = 0
            self._empty_in_a_row = 0
        else:
            self._next = (self._next + 1) % len(self.queues)
            self._empty_in_a_row += 1
