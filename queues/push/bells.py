"""The push queues' doorbells, heard on the pusher's event loop.

Whoever makes tasks claimable rings the queue's doorbell (``queues.dispatch.doorbell``), a push
queue's on a channel of its own. The pusher's pass runs on its own thread and would otherwise find
new tasks only on its timers; this listener waits on the process's hub of the push queues' bells
with one waiter per push queue and hands the names that rang to the pass, waking it (``wake``).

The waiters are registered afresh after each bell and whenever the queue names change (a queue
switched to push). A bell rung while they are re-registered is not lost: the pass it woke claims
anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue as thread_queue
import threading

from queues.dispatch import doorbell

#: How often the listener looks again at the names to listen for when it has none, or heard nothing.
RECHECK_SECONDS = 1.0


class PushBells:
    """Which push queues rang since the pass last asked; ``listen`` runs on the event loop."""

    def __init__(self, wake: threading.Event, batch: int) -> None:
        self.wake = wake
        self.batch = batch  # how many tasks one bell may wake this listener for (a claim's most)
        #: The push queues to listen for (replaced whole by the pass's thread).
        self.names: tuple[str, ...] = ()
        #: The push queues whose doorbells are being waited on right now (no bell pending).
        self.listening_for: frozenset[str] = frozenset()
        self._rung: thread_queue.SimpleQueue[str] = thread_queue.SimpleQueue()

    def pending(self) -> bool:
        """A bell rang that the pass has not taken yet."""
        return not self._rung.empty()

    def take(self) -> set[str]:
        """The names of the push queues that rang since the last call."""
        rung: set[str] = set()
        while True:
            try:
                rung.add(self._rung.get_nowait())
            except thread_queue.Empty:
                return rung

    async def listen(self) -> None:
        """On the event loop, until cancelled: note the bells of ``names`` and wake the pass."""
        hub = doorbell.hub(push=True)
        while True:
            names = self.names
            if not names:
                await asyncio.sleep(RECHECK_SECONDS)
                continue
            async with contextlib.AsyncExitStack() as stack:
                waiters = [await stack.enter_async_context(hub.waiter(name, self.batch)) for name in names]
                if not any(waiter.event.is_set() for waiter in waiters):
                    self.listening_for = frozenset(names)
                waits = [asyncio.ensure_future(waiter.event.wait()) for waiter in waiters]
                try:
                    await asyncio.wait(waits, timeout=RECHECK_SECONDS, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for wait in waits:
                        wait.cancel()
                rung = [waiter.queue_name for waiter in waiters if waiter.event.is_set()]
                self.listening_for = frozenset()
            for name in rung:
                if name is not None:
                    self._rung.put(name)
            if rung:
                self.wake.set()

    @staticmethod
    async def close() -> None:
        """Stop the process's doorbell hub on this event loop (the pusher's, at shutdown)."""
        await doorbell.hub(push=True).aclose()
