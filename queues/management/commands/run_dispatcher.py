"""Keep the Redis priority lanes filled from Postgres (see queues.loops.dispatcher)."""

from __future__ import annotations

from queues.loops import dispatcher
from taskforge.infra.loop import LoopCommand


class Command(LoopCommand):
    help = "Run the dispatcher loop: refill each queue's Redis priority lane from Postgres."
    loop_name = "dispatcher"
    interval = 1.0

    def tick(self) -> int:
        return dispatcher.run_once()
