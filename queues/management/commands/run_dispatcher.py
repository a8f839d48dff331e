"""Keep the Redis dispatch lanes filled from Postgres."""

from __future__ import annotations

from taskforge.loop import LoopCommand


class Command(LoopCommand):
    help = "Run the dispatcher loop."
    loop_name = "dispatcher"
    interval = 1.0

    def tick(self) -> int:
        return 0
