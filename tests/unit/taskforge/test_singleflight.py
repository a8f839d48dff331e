"""``SingleFlight``: callers that arrive while a computation runs share it; later callers start anew."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from taskforge.infra.singleflight import SingleFlight


def test_callers_that_arrive_while_it_runs_share_one_run_and_later_ones_start_a_new_one():
    release = threading.Event()
    started = threading.Event()
    runs = itertools.count(1)

    def compute() -> int:
        started.set()
        release.wait(5)
        return next(runs)

    flight = SingleFlight(compute)
    arrived = itertools.count()
    count_lock = threading.Lock()
    seen = []

    def caller() -> int:
        with count_lock:
            seen.append(next(arrived))
        return flight()

    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(flight)
        assert started.wait(5)
        others = [pool.submit(caller) for _ in range(7)]
        while len(seen) < 7:
            time.sleep(0.01)
        time.sleep(0.2)  # each is past its count and into flight() (microseconds), well before the release
        release.set()
        results = [first.result(5), *(other.result(5) for other in others)]
    assert results == [1] * 8  # one run for all eight
    assert flight() == 2  # nothing running: a fresh run, never an old result


def test_the_running_computations_error_reaches_its_waiters_and_the_next_call_tries_again():
    release = threading.Event()
    started = threading.Event()
    calls = itertools.count(1)

    def compute() -> str:
        if next(calls) == 1:
            started.set()
            release.wait(5)
            raise ConnectionError("database gone")
        return "ok"

    flight = SingleFlight(compute)
    with ThreadPoolExecutor(2) as pool:
        leader = pool.submit(flight)
        assert started.wait(5)
        waiter = pool.submit(flight)
        release.set()
        for future in (leader, waiter):
            with pytest.raises(ConnectionError, match="database gone"):
                future.result(5)
    assert flight() == "ok"
