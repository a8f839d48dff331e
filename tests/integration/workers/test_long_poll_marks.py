"""Which attempts a long poll makes, on a real doorbell hub (this test's Redis database).

A claim that must wait registers with the hub and used to try again at once,
in case a bell rang between its first attempt and the registration. When the
hub was listening all along and heard no claim bell meanwhile, that attempt
can find nothing new (a task is announced after its commit), so the poll
waits for the next bell instead; when a bell did come, or the hub was not
listening yet, or the poll waits for a task's result, it still tries again
at once.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from queues.dispatch import doorbell
from workers.longpoll import AGAIN, FIRST, LAST, WaitFor, long_poll

pytestmark = pytest.mark.django_db

QUEUE = "marks"


class Attempts:
    """A poll's attempts, as the claim view would answer them: nothing until ``ready``, then the answer."""

    def __init__(self, *, wait_seconds: float = 1.0, task_id: str | None = None) -> None:
        self.kinds: list[tuple[str, float]] = []
        self.ready = False
        self.during_first: asyncio.Future[None] | None = None
        self.started = time.monotonic()
        self.wait = WaitFor(QUEUE, 1, wait_seconds, task_id=task_id)

    async def __call__(self, kind: str) -> WaitFor | None:
        self.kinds.append((kind, time.monotonic() - self.started))
        if kind == FIRST and self.during_first is not None:
            await self.during_first
        return None if self.ready else self.wait

    def names(self) -> list[str]:
        return [kind for kind, _ in self.kinds]


async def _listening_hub() -> doorbell.Hub:
    """This loop's hub, subscribed (as it is in a server once any poll has waited)."""
    hub = doorbell.hub()
    async with hub.waiter(QUEUE, 1):
        pass
    assert hub.connected
    return hub


async def _heard(hub: doorbell.Hub, mark: int | None) -> None:
    deadline = time.monotonic() + 5
    while hub.heard_nothing_since(mark):
        assert time.monotonic() < deadline, "the hub never heard the bell"
        await asyncio.sleep(0.005)


def test_a_quiet_hub_lets_the_poll_wait_after_its_first_attempt_and_a_bell_ends_it():
    async def scenario() -> Attempts:
        await _listening_hub()
        attempts = Attempts(wait_seconds=10)
        poll = asyncio.ensure_future(long_poll(attempts))
        await asyncio.sleep(0.3)
        assert attempts.names() == [FIRST]  # waiting, with no second attempt
        attempts.ready = True
        doorbell.ring(QUEUE, 1, push=False)
        await asyncio.wait_for(poll, 5)
        return attempts

    attempts = asyncio.run(scenario())
    assert attempts.names() == [FIRST, AGAIN]
    assert attempts.kinds[1][1] < 5  # woken by the bell, not by the deadline


def test_a_bell_heard_during_the_first_attempt_makes_the_poll_try_again_at_once():
    async def scenario() -> Attempts:
        hub = await _listening_hub()
        attempts = Attempts(wait_seconds=10)
        attempts.during_first = asyncio.get_running_loop().create_future()
        poll = asyncio.ensure_future(long_poll(attempts))
        await asyncio.sleep(0.05)
        mark = hub.mark()
        doorbell.ring(QUEUE, 1, push=False)  # a task committed after the first attempt read
        await _heard(hub, mark)
        attempts.during_first.set_result(None)
        await asyncio.sleep(0.3)
        assert attempts.names() == [FIRST, AGAIN]
        attempts.ready = True
        doorbell.ring(QUEUE, 1, push=False)
        await asyncio.wait_for(poll, 5)
        return attempts

    attempts = asyncio.run(scenario())
    assert attempts.kinds[1][1] < 1  # at once, not after a wait


def test_a_hub_not_listening_yet_makes_the_poll_try_again_at_once():
    async def scenario() -> Attempts:
        attempts = Attempts(wait_seconds=0.5)  # a fresh loop: its hub has not subscribed yet
        await asyncio.wait_for(long_poll(attempts), 5)
        return attempts

    attempts = asyncio.run(scenario())
    assert attempts.names()[:2] == [FIRST, AGAIN]
    assert attempts.kinds[1][1] < 0.4
    assert attempts.names()[-1] == LAST


def test_a_wait_for_a_result_always_tries_again_after_subscribing_to_the_task():
    async def scenario() -> Attempts:
        await _listening_hub()
        attempts = Attempts(wait_seconds=0.5, task_id="00000000-0000-0000-0000-000000000001")
        await asyncio.wait_for(long_poll(attempts), 5)
        return attempts

    attempts = asyncio.run(scenario())
    assert attempts.names()[:2] == [FIRST, AGAIN]
    assert attempts.kinds[1][1] < 0.4
