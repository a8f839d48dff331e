"""Remembering a Redis outage, so callers go straight to Postgres instead of timing out.

After one Redis error every dispatch path (announcing, claiming) skips Redis for
``REDIS_BACKOFF_SECONDS``; Postgres stays the truth meanwhile and the loops
re-derive what Redis missed.
"""

from __future__ import annotations

import logging
import time

logger = logging.getLogger("taskforge.dispatch")

#: After a Redis error, go straight to Postgres for this long instead of timing out on every call.
REDIS_BACKOFF_SECONDS = 1.0

_redis_down_until = 0.0


def redis_usable() -> bool:
    return time.monotonic() >= _redis_down_until


def redis_failed(exc: Exception, doing: str) -> None:
    global _redis_down_until
    _redis_down_until = time.monotonic() + REDIS_BACKOFF_SECONDS
    logger.warning("redis unavailable while %s: %s", doing, exc, extra={"event": "dispatch.redis_down"})


def forget_outage() -> None:
    """Treat Redis as usable again at once (tests that point the process at another Redis:
    an outage remembered from a dead one must not skip the next test's lanes and bells)."""
    global _redis_down_until
    _redis_down_until = 0.0
