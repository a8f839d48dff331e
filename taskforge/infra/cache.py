"""Django's cache on ``REDIS_URL``, whichever kind of Redis it names (django-redis underneath).

``CACHES`` keeps ``REDIS_URL`` as its location; :class:`CacheConnectionFactory`
turns a Sentinel or Cluster URL into the same clients ``taskforge.infra.redis``
makes for everything else, and :class:`CacheClient` sends the few calls that would
span slots on a Cluster slot by slot.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.cluster
from django_redis.client import DefaultClient  # type: ignore[import-untyped]  # django-redis ships no annotations
from django_redis.exceptions import ConnectionInterrupted  # type: ignore[import-untyped]
from django_redis.pool import ConnectionFactory  # type: ignore[import-untyped]

from taskforge.infra.redis import Client, cluster_target, connect, sentinel_target


class CacheConnectionFactory(ConnectionFactory):  # type: ignore[misc]
    """django-redis's connection factory, taught ``redis+sentinel://`` and ``redis+cluster://`` (``CACHES``
    keeps ``REDIS_URL`` as its location).

    django-redis's own Sentinel support wants the sentinels in a separate
    option and the master name as the URL's host (lower-cased on the way), and
    it has no Cluster support; this keeps one URL for every Redis user instead.
    """

    _shared: dict[str, Client] = {}

    def connect(self, url: str) -> Client:
        if sentinel_target(url) is None and cluster_target(url) is None:
            plain: redis.Redis = super().connect(url)
            return plain
        if url not in self._shared:
            params = self.make_connection_params(url)
            options = {k: params[k] for k in ("socket_timeout", "socket_connect_timeout") if k in params}
            self._shared[url] = connect(url, **options)
        shared = self._shared[url]
        if isinstance(shared, redis.cluster.RedisCluster):
            return shared  # thread-safe, and it owns one pool per node
        return redis.Redis(connection_pool=shared.connection_pool)

    def disconnect(self, connection: Client) -> None:
        if isinstance(connection, redis.cluster.RedisCluster):
            connection.disconnect_connection_pools()  # type: ignore[no-untyped-call]
        else:
            super().disconnect(connection)


class CacheClient(DefaultClient):  # type: ignore[misc]
    """django-redis's client; on a Redis Cluster the calls that would span slots go slot by slot.

    Django's cache keys carry no hash tag (each key may live on another node), so
    ``MGET`` over several keys would be refused with ``CROSSSLOT`` and ``KEYS``
    would ask one node only: ``mget_nonatomic`` groups the keys by slot, and
    ``SCAN`` visits every primary. Multi-key ``DEL`` is split by slot by redis-py
    itself, and ``FLUSHDB`` (``clear``) goes to every primary.
    """

    def get_many(self, keys: Any, version: int | None = None, client: Any = None) -> dict[Any, Any]:
        if client is None:
            client = self.get_client(write=False)
        if not isinstance(client, redis.cluster.RedisCluster):
            found: dict[Any, Any] = super().get_many(keys, version=version, client=client)
            return found
        if not keys:
            return {}
        map_keys = {self.make_key(k, version=version): k for k in keys}
        try:
            results = client.mget_nonatomic(list(map_keys))
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as exc:
            raise ConnectionInterrupted(connection=client) from exc
        return {map_keys[k]: self.decode(v) for k, v in zip(map_keys, results, strict=True) if v is not None}

    def keys(self, search: str, version: int | None = None, client: Any = None) -> list[Any]:
        if client is None:
            client = self.get_client(write=False)
        if not isinstance(client, redis.cluster.RedisCluster):
            found: list[Any] = super().keys(search, version=version, client=client)
            return found
        return list(self.iter_keys(search, version=version, client=client))
