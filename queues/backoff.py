"""Retry backoff: a pure function, so it can be tested without a clock."""

from __future__ import annotations

import random


def backoff_ms(retry_number: int, base_ms: int, max_delay_ms: int, *, rand: random.Random | None = None) -> int:
    """Delay before retry number ``retry_number`` (0 for the first retry).

    ``min(base * 2^n + rand(0, base), max_delay)``: the jitter spreads retries
    of tasks that failed together so they do not come back as one herd.
    """
    if retry_number < 0:
        raise ValueError("retry_number starts at 0")
    jitter = (rand or random).randint(0, base_ms)
    # Cap the exponent first: 2**n for large n is a huge int for nothing.
    exponential = base_ms * (1 << min(retry_number, 62))
    return min(exponential + jitter, max_delay_ms)
