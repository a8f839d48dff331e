"""Failpoint configuration: the ``[P%][N*]action[:arg]`` specs, counts and actions, in process.

What a fired failpoint does to a real request or process is in
tests/tools/faults/test_failpoints.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from django.core.exceptions import ImproperlyConfigured

from taskforge.ops import failpoints


def test_unconfigured_failpoint_does_nothing(settings):
    settings.TASKFORGE_FAILPOINTS = ""
    failpoints.failpoint("claim.after_commit")  # no error, no delay


@pytest.mark.parametrize(
    "config",
    ["claim.after_commit", "nowhere=kill", "claim.after_commit=explode", "ack.after_commit=sleep", "x%kill"],
)
def test_malformed_configuration_is_refused(config):
    with pytest.raises(ImproperlyConfigured):
        failpoints.parse(config)


def test_specs_parse_probability_count_and_argument():
    parsed = failpoints.parse("claim.after_commit=25%2*kill, ack.after_commit=sleep:0.5,enqueue.after_commit=off")
    claim, ack, enqueue = parsed["claim.after_commit"], parsed["ack.after_commit"], parsed["enqueue.after_commit"]
    assert (claim.action, claim.percent, claim.remaining) == ("kill", 25.0, 2)
    assert (ack.action, ack.arg, ack.percent, ack.remaining) == ("sleep", 0.5, 100.0, None)
    assert not enqueue.should_fire()


def test_count_limits_how_often_a_point_fires(settings):
    settings.TASKFORGE_FAILPOINTS = "ack.after_commit=2*raise"
    for _ in range(2):
        with pytest.raises(failpoints.FailpointError):
            failpoints.failpoint("ack.after_commit")
    failpoints.failpoint("ack.after_commit")  # spent: silent from now on


def test_sleep_stalls_the_caller(settings):
    settings.TASKFORGE_FAILPOINTS = "watchdog.after_expire=sleep:0.3"
    started = time.monotonic()
    failpoints.failpoint("watchdog.after_expire")
    assert time.monotonic() - started >= 0.3


def test_on_the_event_loop_a_sleep_holds_up_its_own_coroutine_only(settings):
    settings.TASKFORGE_FAILPOINTS = "enqueue.after_commit=sleep:0.3"
    ticks: list[float] = []

    async def tick() -> None:
        for _ in range(5):
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    async def both() -> float:
        started = time.monotonic()
        await asyncio.gather(failpoints.failpoint_on_loop("enqueue.after_commit"), tick())
        return started

    started = asyncio.run(both())
    assert time.monotonic() - started >= 0.3  # the caller waited
    assert len(ticks) == 5 and ticks[-1] - started < 0.3  # the loop went on meanwhile


def test_on_the_event_loop_a_raise_raises(settings):
    settings.TASKFORGE_FAILPOINTS = "enqueue.after_commit=raise"
    with pytest.raises(failpoints.FailpointError):
        asyncio.run(failpoints.failpoint_on_loop("enqueue.after_commit"))
