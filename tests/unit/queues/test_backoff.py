"""Backoff, the pure formula of API.md.

``delay_ms = min(retry_base_ms * 2^n + rand(0, retry_base_ms), retry_max_delay_ms)``, n = 0 for the first
retry. The delays the nack and expiry paths really schedule are checked against Postgres in
tests/integration/queues/test_backoff.py.
"""

from __future__ import annotations

import random

import pytest

from queues.backoff import backoff_ms


@pytest.mark.parametrize("n", range(8))
@pytest.mark.parametrize("base", [1, 250, 1000])
def test_backoff_stays_within_the_formula(n, base):
    rand = random.Random(n * 1000 + base)
    delays = [backoff_ms(n, base, 10**12, rand=rand) for _ in range(300)]
    low, high = base * 2**n, base * 2**n + base
    assert all(low <= delay <= high for delay in delays)
    if base > 1:
        # The jitter really spreads (and reaches both ends over enough draws for a small base).
        assert len(set(delays)) > 1


def test_first_retry_is_n_zero():
    assert backoff_ms(0, 1000, 10**9, rand=random.Random(0)) in range(1000, 2001)
    assert backoff_ms(1, 1000, 10**9, rand=random.Random(0)) in range(2000, 3001)


def test_jitter_bounds_are_inclusive():
    class Fixed(random.Random):
        def __init__(self, value):
            super().__init__()
            self.value = value

        def randint(self, a, b):
            assert (a, b) == (0, 500)
            return b if self.value == "max" else a

    assert backoff_ms(2, 500, 10**9, rand=Fixed("min")) == 2000
    assert backoff_ms(2, 500, 10**9, rand=Fixed("max")) == 2500


@pytest.mark.parametrize("n", [0, 5, 20, 62, 63, 1000])
def test_backoff_is_capped(n):
    rand = random.Random(n)
    assert backoff_ms(n, 1000, 3_600_000, rand=rand) <= 3_600_000
    assert backoff_ms(n, 1000, 1000, rand=rand) == 1000


def test_cap_applies_to_the_jitter_too():
    rand = random.Random(1)
    # 2^2 * 1000 = 4000, plus up to 1000 of jitter: never more than the 4500 cap.
    assert all(4000 <= backoff_ms(2, 1000, 4500, rand=rand) <= 4500 for _ in range(200))


def test_negative_retry_number_is_refused():
    with pytest.raises(ValueError):
        backoff_ms(-1, 1000, 10_000)
