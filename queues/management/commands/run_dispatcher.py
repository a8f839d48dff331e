"""Keep the Redis priority lanes filled from Postgres (see queues.dispatch.refill_lanes)."""

from __future__ import annotations

import redis

from queues import dispatch
from taskforge.infra.loop import LoopCommand


class Command(LoopCommand):
    help = "Run the dispatcher loop: refill each queue's Redis priority lane from Postgres."
    loop_name = "dispatcher"
    interval = 1.0

    def tick(self) -> int:
        try:
            return dispatch.refill_lanes()
        except redis.RedisError as exc:
            # Not an error backoff: claims use Postgres meanwhile, and the lanes must be
            # rebuilt within a tick of Redis coming back.
            self.logger.warning(
                "redis unavailable: lanes not refilled: %s", exc, extra={"event": "dispatch.redis_down"}
            )
            return 0
