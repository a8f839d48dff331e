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


def test_outcomes_not_yet_confirmed_stop_the_claims_at_the_ceiling():
    """Acks failing (TaskForge half down) must not let the worker claim without bound."""
    table = InFlight(concurrency=2, prefetch=1)
    claimed = 0
    for n in range(20):
        room = table.room(wait=0)
        if room <= 0:
            break
        for one in (flight(100 * n + k) for k in range(room)):
            table.add(one)
            assert table.begin(one)
            table.handler_returned(one)  # finished; its ack is never confirmed (no forget)
            claimed += 1
    assert claimed == table.most == 4  # the handlers' tasks plus one round of unconfirmed outcomes
    assert table.unconfirmed_count() == 4
    assert table.room(wait=0) == 0
    table.forget(table.due_for_heartbeat(time.monotonic() + 60)[0])  # one ack confirmed
    assert table.room(wait=0) == 1


def test_a_heartbeat_on_its_way_is_not_sent_again():
    table = InFlight(concurrency=1)
    one = flight(1)
    table.add(one)
    later = time.monotonic() + 60
    assert table.due_for_heartbeat(later) == [one]
    assert table.due_for_heartbeat(later) == []  # the first beat has not come back yet
    table.beat_done(one, next_beat=0)
    assert table.due_for_heartbeat(later) == [one]


def test_a_running_task_past_its_time_limit_times_out_but_keeps_its_slot_until_the_handler_returns():
    table = InFlight(concurrency=1)
    limited = Flight.start(Job("1", "q", {}, 1, 0, "w", "lease", {"timeout_seconds": 5}), heartbeat_interval=10)
    table.add(limited)
    assert table.begin(limited)
    assert table.time_out(time.monotonic()) == []
    assert table.time_out(time.monotonic() + 6) == [limited]
    assert limited.state == "timed_out" and limited.job.cancelled.is_set()
    assert table.time_out(time.monotonic() + 6) == []  # nacked once
    assert table.held_count() == 1  # the thread still runs the handler
    assert table.handler_returned(limited).startswith("its execution time limit had passed")
    assert table.held_count() == 0
