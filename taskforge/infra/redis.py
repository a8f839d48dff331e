"""The process's Redis clients, for a single server or a Sentinel-managed one.

``REDIS_URL`` is either a URL redis-py understands (``redis://``, ``rediss://``,
``unix://``) or, for a primary watched by Redis Sentinel::

    redis+sentinel://[[username]:password@]host1:port1,host2:port2/<master-name>/<db>

(``?sentinel_password=...`` when the sentinels require a password of their own).
Every Redis user goes through here: ``redis_client()`` (one pool per process),
``async_redis_client()`` (the doorbell's subscription) and Django's cache
(``CacheConnectionFactory``). With Sentinel each connection asks the sentinels
where the primary is, so after a failover new connections reach the promoted
replica; the errors in between are ordinary Redis errors, which every caller
already treats as an outage (Postgres stays the truth).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel as aiosentinel
import redis.sentinel
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django_redis.pool import ConnectionFactory  # type: ignore[import-untyped]

SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_DEFAULT_PORT = 26379

_client: redis.Redis | None = None


@dataclass(frozen=True)
class SentinelTarget:
    """Where a ``redis+sentinel://`` URL points: the sentinels, and which primary and database to use."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    db: int
    username: str | None
    password: str | None
    sentinel_password: str | None

    def sentinel_kwargs(self, options: dict[str, Any]) -> dict[str, Any]:
        # The sentinels get the same timeouts: an unreachable sentinel must not
        # stall a request longer than an unreachable primary would.
        kwargs = {k: v for k, v in options.items() if k.startswith("socket_")}
        if self.sentinel_password is not None:
            kwargs["password"] = self.sentinel_password
        return kwargs

    def master_kwargs(self, options: dict[str, Any]) -> dict[str, Any]:
        return {**options, "db": self.db, "username": self.username, "password": self.password}


def sentinel_target(url: str) -> SentinelTarget | None:
    """The parsed ``redis+sentinel://`` URL, or None for any other URL (raises on a malformed one)."""
    parts = urlsplit(url)
    if parts.scheme != SENTINEL_SCHEME:
        return None

    def bad(why: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(
            f"REDIS_URL: {why}; expected {SENTINEL_SCHEME}://[:password@]host1:port1,host2:port2/<master-name>/<db>"
        )

    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    sentinels = []
    for node in hosts.split(","):
        node = node.strip()
        host, colon, port = node.rpartition(":")
        if not colon or node.endswith("]"):  # no port (``[::1]`` is an IPv6 literal without one)
            host, port = node, ""
        host = host.strip("[]")
        if not host:
            raise bad(f"sentinel address {node!r} has no host")
        if port and not port.isdigit():
            raise bad(f"sentinel address {node!r} has a port that is not a number")
        sentinels.append((host, int(port) if port else SENTINEL_DEFAULT_PORT))
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path:
        raise bad("the master name is missing")
    if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise bad(f"{parts.path!r} is not /<master-name>/<db>")
    query = parse_qs(parts.query)
    unknown = set(query) - {"sentinel_password"}
    if unknown:
        raise bad(f"unknown parameter(s) {', '.join(sorted(unknown))}")
    return SentinelTarget(
        sentinels=tuple(sentinels),
        master_name=path[0],
        db=int(path[1]) if len(path) == 2 else 0,
        username=unquote(username) or None,
        password=unquote(password) if userinfo else None,
        sentinel_password=query["sentinel_password"][0] if "sentinel_password" in query else None,
    )


def connect(url: str, **options: Any) -> redis.Redis:
    """A client for ``url`` with its own pool; ``options`` are redis-py connection options."""
    target = sentinel_target(url)
    if target is None:
        return redis.Redis.from_url(url, **options)
    # redis-py's Sentinel API carries no annotations.
    manager = redis.sentinel.Sentinel(target.sentinels, sentinel_kwargs=target.sentinel_kwargs(options))  # type: ignore[no-untyped-call]
    client: redis.Redis = manager.master_for(target.master_name, **target.master_kwargs(options))  # type: ignore[no-untyped-call]
    return client


class _AsyncSentinelMaster(aioredis.Redis):
    """Closing the client also closes its connections to the sentinels (it owns them)."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool = self.connection_pool
        if isinstance(pool, aiosentinel.SentinelConnectionPool):
            await pool.sentinel_manager.aclose()


def async_redis_client(**options: Any) -> aioredis.Redis:
    """A new asyncio client for ``REDIS_URL``, owned (and closed) by the caller."""
    url = settings.REDIS_URL
    target = sentinel_target(url)
    if target is None:
        return aioredis.Redis.from_url(url, **options)
    manager = aiosentinel.Sentinel(target.sentinels, sentinel_kwargs=target.sentinel_kwargs(options))  # type: ignore[no-untyped-call]
    client: aioredis.Redis = manager.master_for(
        target.master_name, redis_class=_AsyncSentinelMaster, **target.master_kwargs(options)
    )
    return client


def redis_client() -> redis.Redis:
    global _client
    if _client is None:
        _client = connect(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2, health_check_interval=30)
    return _client


class CacheConnectionFactory(ConnectionFactory):  # type: ignore[misc]  # django-redis ships no annotations
    """django-redis's connection factory, taught ``redis+sentinel://`` (``CACHES`` keeps ``REDIS_URL`` as its location).

    django-redis's own Sentinel support wants the sentinels in a separate
    option and the master name as the URL's host (lower-cased on the way);
    this keeps one URL for every Redis user instead.
    """

    _sentinel_pools: dict[str, redis.ConnectionPool] = {}

    def connect(self, url: str) -> redis.Redis:
        if sentinel_target(url) is None:
            plain: redis.Redis = super().connect(url)
            return plain
        if url not in self._sentinel_pools:
            params = self.make_connection_params(url)
            options = {k: params[k] for k in ("socket_timeout", "socket_connect_timeout") if k in params}
            self._sentinel_pools[url] = connect(url, **options).connection_pool
        return redis.Redis(connection_pool=self._sentinel_pools[url])
