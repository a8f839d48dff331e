"""Deliver the tasks of push queues over HTTP (see queues.loops.pusher)."""

from __future__ import annotations

from typing import Any

from queues.loops import pusher
from taskforge.infra.loop import LoopCommand

#: How long an idle pass waits for an answer to come back before it looks for new tasks.
IDLE_WAIT_SECONDS = 0.2


class Command(LoopCommand):
    help = "Run the pusher loop: deliver the due tasks of push queues over HTTP, signed."
    loop_name = "pusher"
    interval = 0.0  # a pass with nothing to do waits on its own answers instead (below)

    def handle(self, *args: Any, **options: Any) -> None:
        self.pusher = pusher.Pusher()
        try:
            super().handle(*args, **options)
        finally:
            self.pusher.close()

    def tick(self) -> int:
        handled = self.pusher.run_once().handled
        # Even after a busy pass: the next one waits for a batch of answers (Pusher.wait).
        self.pusher.wait(IDLE_WAIT_SECONDS)
        return handled
