"""How many tasks the reference worker holds: its handlers plus a prefetch bounded by their pace."""

from __future__ import annotations

import time

from taskforge_client.worker import flights as flights_module
from taskforge_client.worker.flights import Flight, InFlight
from taskforge_client.worker.job import Job


def flight(n: int) -> Flight:
    job = Job(str(n), "q", {}, 1, 0, "w", "lease", {})
    return Flight.start(job, heartbeat_interval=10)


def finish(table: InFlight, held: Flight, seconds: float, *, claimed: bool = False) -> None:
    """Run ``held`` (claimed now unless it was already) through a handler that took ``seconds``."""
    if not claimed:
        table.add(held)
    assert table.begin(held)
    held.started = time.monotonic() - seconds
    table.handler_returned(held)
    table.forget(held)


def test_before_any_task_ran_only_one_per_handler_is_claimed():
    table = InFlight(concurrency=4, prefetch=16)
    assert table.room(wait=0) == 4


def test_short_tasks_get_the_whole_prefetch():
    table = InFlight(concurrency=4, prefetch=16)
    finish(table, flight(0), seconds=0.0001)
    assert table.room(wait=0) == 64


def test_long_tasks_are_not_hoarded():
    table = InFlight(concurrency=4, prefetch=16)
    finish(table, flight(0), seconds=1.9 * flights_module.PREFETCH_HORIZON_SECONDS)
    assert table.room(wait=0) == 4 + 2  # handlers plus about a horizon of work
    finish(table, flight(1), seconds=60)  # the average moves towards the new pace
    assert table.room(wait=0) == 4


def test_a_claim_waits_until_half_the_limit_is_free_while_tasks_wait():
    table = InFlight(concurrency=2, prefetch=4)
    finish(table, flight(0), seconds=0.0001)
    held = [flight(n) for n in range(1, 7)]
    for one in held:
        table.add(one)
    assert table.room(wait=0) == 0  # 6 of 8 held, 4 of them waiting: not worth a claim yet
    for one in held[:2]:
        finish(table, one, seconds=0.0001, claimed=True)
    assert table.room(wait=0) == 4


def test_waiting_tasks_are_handed_back_at_shutdown_and_never_started():
    table = InFlight(concurrency=1, prefetch=4)
    running, waiting = flight(1), flight(2)
    table.add(running)
    table.add(waiting)
    assert table.begin(running)
    assert table.abandon_waiting() == [waiting]
    assert not table.begin(waiting)
    assert waiting.job.cancelled.is_set()
    assert table.held_count() == 1


def test_a_waiting_task_whose_lease_was_lost_is_not_started():
    table = InFlight(concurrency=1, prefetch=4)
    waiting = flight(1)
    table.add(waiting)
    assert table.mark_lost(waiting)
    assert not table.begin(waiting)
    assert table.held_count() == 0
    assert table.due_for_heartbeat(time.monotonic() + 60) == []
