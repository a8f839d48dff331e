"""The process's Redis clients, for a single server, a Sentinel-managed one or a Redis Cluster.

``REDIS_URL`` is either a URL redis-py understands (``redis://``, ``rediss://``,
``unix://``) or, for a primary watched by Redis Sentinel::

    redis+sentinel://[[username]:password@]host1:port1,host2:port2/<master-name>/<db>

(``?sentinel_password=...`` when the sentinels require a password of their own),
or, for a Redis Cluster (``rediss+cluster://`` for TLS)::

    redis+cluster://[[username]:password@]host1:port1,host2:port2[/0]

(any few nodes of the cluster: the client learns the rest, and which node serves
which slot, from them). Every Redis user goes through here: ``redis_client()``
(one pool per process), ``async_pubsub_client()`` (the doorbell's subscription)
and Django's cache (``taskforge.infra.cache``). With Sentinel each connection
asks the sentinels where the primary is, so after a failover new connections
reach the promoted replica; with Cluster the client follows ``MOVED`` replies and
refreshes its slot map after a connection error, so it reaches a promoted replica
the same way. The errors in between are ordinary Redis errors, which every caller
already treats as an outage (Postgres stays the truth).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.asyncio.sentinel as aiosentinel
import redis.cluster
import redis.sentinel
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from redis.backoff import ExponentialWithJitterBackoff
from redis.connection import parse_url
from redis.exceptions import CrossSlotTransactionError, InvalidPipelineStack, RedisClusterException
from redis.retry import Retry

SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_DEFAULT_PORT = 26379
#: The Cluster schemes, and whether each speaks TLS.
CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}
CLUSTER_DEFAULT_PORT = 6379

#: What ``redis_client()`` returns: a client of one server (plain or Sentinel's primary), or of a Cluster.
Client = redis.Redis | redis.cluster.RedisCluster
#: A pipeline of either kind. A Cluster pipeline sends each command to its slot's node; a
#: transaction (``MULTI``) there needs every key in one slot, which the hash tags guarantee.
Pipeline = redis.client.Pipeline | redis.cluster.ClusterPipeline

_client: Client | None = None


def _addresses(
    hosts: str, default_port: int, bad: Callable[[str], ImproperlyConfigured]
) -> tuple[tuple[str, int], ...]:
    """``host1:port1,host2,[::1]:port3`` as (host, port) pairs."""
    addresses = []
    for node in hosts.split(","):
        node = node.strip()
        host, colon, port = node.rpartition(":")
        if not colon or node.endswith("]"):  # no port (``[::1]`` is an IPv6 literal without one)
            host, port = node, ""
        host = host.strip("[]")
        if not host:
            raise bad(f"address {node!r} has no host")
        if port and not port.isdigit():
            raise bad(f"address {node!r} has a port that is not a number")
        addresses.append((host, int(port) if port else default_port))
    return tuple(addresses)


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
    sentinels = _addresses(hosts, SENTINEL_DEFAULT_PORT, lambda why: bad(f"sentinel {why}"))
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
        sentinels=sentinels,
        master_name=path[0],
        db=int(path[1]) if len(path) == 2 else 0,
        username=unquote(username) or None,
        password=unquote(password) if userinfo else None,
        sentinel_password=query["sentinel_password"][0] if "sentinel_password" in query else None,
    )


@dataclass(frozen=True)
class ClusterTarget:
    """Where a ``redis+cluster://`` URL points: a few nodes to learn the cluster from, and the credentials."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool

    def node_kwargs(self, options: dict[str, Any]) -> dict[str, Any]:
        """What every connection to a node of the cluster is opened with."""
        kwargs = {**options, "username": self.username, "password": self.password}
        if self.tls:
            kwargs["ssl"] = True
        return kwargs

    def cluster_kwargs(self, options: dict[str, Any]) -> dict[str, Any]:
        return {
            **self.node_kwargs(options),
            # Few, short retries: enough to follow a slot move or a promotion the moment
            # the cluster announces it, short enough that a shard still failing over is an
            # outage the callers handle (Postgres) instead of a request hanging for seconds.
            "retry": Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.2), 3),
        }


def cluster_target(url: str) -> ClusterTarget | None:
    """The parsed ``redis+cluster://`` (or ``rediss+cluster://``) URL, or None for any other URL (raises on a
    malformed one)."""
    parts = urlsplit(url)
    if parts.scheme not in CLUSTER_SCHEMES:
        return None

    def bad(why: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(
            f"REDIS_URL: {why}; expected {parts.scheme}://[[username]:password@]host1:port1,host2:port2[/0]"
        )

    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    nodes = _addresses(hosts, CLUSTER_DEFAULT_PORT, lambda why: bad(f"node {why}"))
    if parts.path.strip("/") not in ("", "0"):
        raise bad(f"{parts.path!r}: a Redis Cluster has only database 0")
    if parts.query:
        raise bad(f"unknown parameter(s) {', '.join(sorted(parse_qs(parts.query, keep_blank_values=True)))}")
    return ClusterTarget(
        nodes=nodes,
        username=unquote(username) or None,
        password=unquote(password) if userinfo else None,
        tls=CLUSTER_SCHEMES[parts.scheme],
    )


def check_url(url: str) -> None:
    """Raise ``ImproperlyConfigured`` for a malformed Sentinel or Cluster URL (at start, not at first use)."""
    sentinel_target(url)
    cluster_target(url)


class ClusterUnavailable(redis.ConnectionError):
    """The Cluster client found no node to ask, no node serving a slot, or a slot map it cannot use.

    redis-py raises ``RedisClusterException`` for these, which is no
    ``RedisError``; every caller here treats a ``RedisError`` as an outage (and
    Postgres as the truth), so on a Cluster they are one too.
    """


@contextmanager
def _cluster_errors_as_outages() -> Iterator[None]:
    try:
        yield
    except (CrossSlotTransactionError, InvalidPipelineStack):
        raise  # a MULTI over two slots is a mistake in the code, not an outage
    except RedisClusterException as exc:
        raise ClusterUnavailable(str(exc)) from exc


class _ClusterPipeline(redis.cluster.ClusterPipeline):
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        with _cluster_errors_as_outages():
            return super().execute(raise_on_error)


class _Cluster(redis.cluster.RedisCluster):
    """redis-py's Cluster client, its errors of reach raised as ``RedisError`` (:class:`ClusterUnavailable`)."""

    def __init__(self, **kwargs: Any) -> None:
        with _cluster_errors_as_outages():  # it reads the slot map from the startup nodes at once
            super().__init__(**kwargs)

    # redis-py's cluster module leaves these two unannotated.
    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        with _cluster_errors_as_outages():
            return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> _ClusterPipeline:
        pipe: _ClusterPipeline = super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        # The same object with execute() guarded: it adds no state, and building it
        # here instead would copy the dozen arguments redis-py passes its pipelines.
        pipe.__class__ = _ClusterPipeline
        return pipe


def connect(url: str, **options: Any) -> Client:
    """A client for ``url`` with its own pool(s); ``options`` are redis-py connection options.

    A Cluster client reads the slot map when it is made, so for a Cluster none of
    whose nodes answers this raises :class:`ClusterUnavailable`.
    """
    cluster = cluster_target(url)
    if cluster is not None:
        startup = [redis.cluster.ClusterNode(host, port) for host, port in cluster.nodes]  # type: ignore[no-untyped-call]
        return _Cluster(startup_nodes=startup, **cluster.cluster_kwargs(options))
    target = sentinel_target(url)
    if target is None:
        return redis.Redis.from_url(url, **options)
    # redis-py's Sentinel API carries no annotations.
    manager = redis.sentinel.Sentinel(target.sentinels, sentinel_kwargs=target.sentinel_kwargs(options))  # type: ignore[no-untyped-call]
    client: redis.Redis = manager.master_for(target.master_name, **target.master_kwargs(options))  # type: ignore[no-untyped-call]
    return client


def is_cluster(client: Client | Pipeline) -> bool:
    # A ClusterPipeline is a RedisCluster too.
    return isinstance(client, redis.cluster.RedisCluster)


@functools.lru_cache(maxsize=16)
def database_number(url: str) -> int:
    """The database ``url`` selects (always 0 on a Cluster, which has no others), without connecting."""
    if cluster_target(url) is not None:
        return 0
    target = sentinel_target(url)
    if target is not None:
        return target.db
    return int(parse_url(url).get("db", 0))  # type: ignore[no-untyped-call]


class _AsyncSentinelMaster(aioredis.Redis):
    """Closing the client also closes its connections to the sentinels (it owns them)."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool = self.connection_pool
        if isinstance(pool, aiosentinel.SentinelConnectionPool):
            await pool.sentinel_manager.aclose()


async def async_pubsub_client(channel: str, **options: Any) -> aioredis.Redis:
    """A new asyncio client to subscribe to ``channel`` on, owned (and closed) by the caller.

    A single server or Sentinel's primary serves every channel. On a Cluster this is
    the primary of the channel's slot: sharded pub/sub (``SSUBSCRIBE``) is served by
    that shard alone, so channels sharing one hash tag share this one connection. The
    slot map is read afresh each time, so a reconnect after a failover reaches the
    promoted replica.
    """
    url = settings.REDIS_URL
    cluster = cluster_target(url)
    if cluster is not None:
        startup = [aiocluster.ClusterNode(host, port) for host, port in cluster.nodes]
        # Only asked for the slot map (redis-py's asyncio client takes no synchronous ``retry``).
        finder = aiocluster.RedisCluster(startup_nodes=startup, **cluster.node_kwargs(options))
        try:
            with _cluster_errors_as_outages():
                await finder.initialize()
                node = finder.get_node_from_key(channel)
        finally:
            await finder.aclose()
        if node is None:
            raise ClusterUnavailable(f"no node serves the slot of {channel!r}")
        return aioredis.Redis(host=node.host, port=int(node.port), **cluster.node_kwargs(options))
    return _async_server_client(url, options)


def _async_server_client(url: str, options: dict[str, Any]) -> aioredis.Redis:
    """An asyncio client of the one server ``url`` names, or of the primary its sentinels name."""
    target = sentinel_target(url)
    if target is None:
        return aioredis.Redis.from_url(url, **options)
    manager = aiosentinel.Sentinel(target.sentinels, sentinel_kwargs=target.sentinel_kwargs(options))  # type: ignore[no-untyped-call]
    client: aioredis.Redis = manager.master_for(
        target.master_name, redis_class=_AsyncSentinelMaster, **target.master_kwargs(options)
    )
    return client


# The event loop's client (None on a Cluster) and the loop: a new loop (tests run one per test) makes its own.
_async_client: tuple[asyncio.AbstractEventLoop, aioredis.Redis | None] | None = None


def async_redis_client() -> aioredis.Redis | None:
    """The running event loop's client for ``REDIS_URL`` (one per loop, made at first use).

    None on a Cluster: code on the loop then leaves Redis to the thread pool's
    synchronous client, which knows the slots. The same timeouts as
    :func:`redis_client`: a Redis that hangs costs a call two seconds, and
    the event loop nothing.
    """
    global _async_client
    loop = asyncio.get_running_loop()
    if _async_client is None or _async_client[0] is not loop:
        _async_client = (loop, _async_client_for(settings.REDIS_URL))
    return _async_client[1]


def _async_client_for(url: str) -> aioredis.Redis | None:
    if cluster_target(url) is not None:
        return None
    return _async_server_client(url, {"socket_timeout": 2, "socket_connect_timeout": 2, "health_check_interval": 30})


def redis_client() -> Client:
    """The process's client for ``REDIS_URL`` (made at first use; on a Cluster that may raise ``RedisError``)."""
    global _client
    if _client is None:
        _client = connect(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2, health_check_interval=30)
    return _client
