"""The process's Redis client (one connection pool per process)."""

from __future__ import annotations

import redis
from django.conf import settings

_client: redis.Redis | None = None


def redis_client() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2, health_check_interval=30
        )
    return _client
