"""bench.phases: one single enqueue's CPU per phase, through the real ASGI application, Postgres and Redis."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from bench import phases
from queues.models import Queue, Task


def _originals() -> list[object]:
    found = []
    for phase in phases.PHASES:
        owner = phases._owner(phase.owner)
        found.append(vars(owner).get(phase.attribute))
    return found


def test_the_phases_are_wrapped_for_the_measure_and_put_back_after_it():
    before = _originals()
    with phases.timed(phases.PHASES):
        during = _originals()
    assert _originals() == before
    # Each function is replaced, a coroutine function by a coroutine function.
    assert all(inside is not outside for inside, outside in zip(during, before, strict=True))
    kinds = [inspect.iscoroutinefunction(function) for function in during]
    assert kinds == [inspect.iscoroutinefunction(function) for function in before]
    assert any(kinds)  # the statement, the check and the announce are awaited


def test_a_phase_whose_function_moved_is_refused_and_nothing_stays_wrapped():
    before = _originals()
    moved = phases.Phase("gone", "queues.lifecycle.rows", "no_such_function")
    with pytest.raises(AttributeError), phases.timed((*phases.PHASES, moved)):
        pass
    assert _originals() == before


@pytest.mark.django_db(transaction=True)
def test_every_phase_of_an_enqueue_is_measured_through_the_application(make_key):
    from taskforge.asgi import application

    Queue.objects.create(name=phases.QUEUE)
    key = make_key("producer")
    figures = asyncio.run(phases.measure(application, key, requests=40))
    # The enqueues really went through: warm-up and measured, each a task.
    assert Task.objects.filter(queue__name=phases.QUEUE).count() == phases.WARM_UP_REQUESTS + 40
    labels = [phase.label for phase in phases.PHASES]
    remainders = ["event loop, the rest", phases.OTHER_THREADS, "the process, in all"]
    assert list(figures) == [*labels, *remainders]
    # Every wrapped function ran in each request, on a thread clock that only moves forward.
    assert all(figures[label] > 0 for label in labels)
    assert figures["event loop, the rest"] >= 0
    assert "| the process, in all |" in phases.table(figures)


@pytest.mark.django_db(transaction=True)
def test_the_same_enqueues_over_http_are_measured_at_the_worker(make_key, live_stack):
    from taskforge.dev import launcher

    Queue.objects.create(name=phases.QUEUE)
    key = make_key("producer")
    url = live_stack.start_api(workers=1)
    (worker,) = launcher.child_pids(live_stack.processes[-1].pid)
    figures = phases.over_http(url, worker, key, requests=60)
    assert Task.objects.filter(queue__name=phases.QUEUE).count() == phases.WARM_UP_REQUESTS + 60
    # The worker's own clock ticks: user time for the 60 measured enqueues (a millisecond or more each) is
    # several ticks of 10 ms.
    assert figures["user"] > 0 and figures["in all"] == pytest.approx(figures["user"] + figures["system"])
    table = phases.http_table(figures, {"the process, in all": 1.0})
    assert "| the worker process, in all |" in table
