"""What a handler raises to steer what happens to its task: ``Retry`` or ``Fail``.

Any other exception is a failed attempt retried with the queue's backoff.
These two change that: ``Retry`` picks the delay, ``Fail`` skips the
remaining attempts and sends the task straight to the dead-letter queue.

Standard library only: handlers import it (``from taskforge_client import Fail, Retry``)
without Django.
"""

from __future__ import annotations

import math

__all__ = ["Fail", "Retry"]


class Retry(Exception):
    """Fail this attempt and run the task again after ``after`` seconds.

    ``after=None`` keeps the queue's exponential backoff. The task still dies
    when it has used ``1 + max_retries`` attempts.
    """

    def __init__(self, message: str = "retry requested", *, after: float | None = None) -> None:
        super().__init__(message)
        if after is not None and (not math.isfinite(after) or after < 0):
            raise ValueError(f"Retry(after=...) must be a finite number of seconds >= 0, got {after!r}")
        # The protocol takes whole seconds: round up so "after 1.5 s" never runs early.
        self.after = None if after is None else math.ceil(after)


class Fail(Exception):
    """Fail the task for good (no more attempts): it goes to the dead-letter queue."""
