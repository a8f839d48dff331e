"""What one round trip to Postgres and to Redis costs on this machine, back to back and after an idle spell.

W4 sends one task every 50 ms, so every process on a task's way from the
producer to the handler (the API, Postgres, Redis, the worker) has been idle
since the task before. On a virtual machine whose idle vCPUs halt at once
(KVM's ``haltpoll`` cpuidle driver with ``guest_halt_poll_ns`` 0, as on the
machines this project is measured on), waking one costs far more than a hot
round trip. The probe measures that floor from the harness, with the
simplest statement and command there are, so W4's figures can be read
against the machine they ran on: a round trip after 50 ms idle, times the
round trips and hand-offs on W4's path, bounds how low W4 can go whatever
the code does.

Only the harness sleeps between the probes; the servers are idle because
nothing else runs between workloads.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import redis

#: W4's interval between tasks (20 tasks/s).
IDLE_SECONDS = 0.05
ROUNDS = 40
WARM_UP_ROUNDS = 5


@dataclass(frozen=True)
class RoundTrips:
    """Median milliseconds of one round trip, back to back and after ``IDLE_SECONDS`` idle."""

    back_to_back_ms: float
    after_idle_ms: float


def round_trip_ms(call: Callable[[], object], *, idle_seconds: float, rounds: int = ROUNDS) -> float:
    """The median wall time of ``call`` in milliseconds, with ``idle_seconds`` of sleep before each."""
    for _ in range(WARM_UP_ROUNDS):
        call()
    times = []
    for _ in range(rounds):
        if idle_seconds:
            time.sleep(idle_seconds)
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def probe(call: Callable[[], object], rounds: int = ROUNDS) -> RoundTrips:
    return RoundTrips(
        back_to_back_ms=round_trip_ms(call, idle_seconds=0, rounds=rounds),
        after_idle_ms=round_trip_ms(call, idle_seconds=IDLE_SECONDS, rounds=rounds),
    )


def postgres(database_url: str, rounds: int = ROUNDS) -> RoundTrips:
    """``SELECT 1`` in autocommit: one round trip to a backend, nothing else."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        return probe(lambda: conn.execute("SELECT 1").fetchone(), rounds)


def redis_server(redis_url: str, rounds: int = ROUNDS) -> RoundTrips:
    """``PING``: one round trip to Redis, nothing else."""
    client = redis.Redis.from_url(redis_url)
    try:
        return probe(client.ping, rounds)
    finally:
        client.close()


def idle_policy() -> dict[str, str]:
    """How this machine's idle CPUs wait (Linux cpuidle), where the kernel says: what makes a wake-up cost."""
    facts: dict[str, str] = {}
    sources = {
        "cpuidle_driver": Path("/sys/devices/system/cpu/cpuidle/current_driver"),
        "cpuidle_governor": Path("/sys/devices/system/cpu/cpuidle/current_governor_ro"),
        "guest_halt_poll_ns": Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns"),
    }
    for name, path in sources.items():
        try:
            facts[name] = path.read_text().strip()
        except OSError:
            continue
    return facts
