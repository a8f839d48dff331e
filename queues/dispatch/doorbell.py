"""Doorbells for long polls: claimers waiting for tasks, producers waiting for a result.

Whoever makes tasks claimable (enqueue, promotion, replay, the scheduler
moving due tasks, the dispatcher refilling a lane, a queue resumed) rings:
one ``PUBLISH`` naming the queue and how many tasks arrived (0: unknown,
wake everyone), on :func:`channel` for a pull queue, whose tasks workers
claim, and on :func:`push_channel` for a push queue, whose tasks only the
pusher takes. Every process that listens reads every bell of its channel
(65 µs of CPU each on a single server, where the event loop's own protocol
reads the subscription, ``taskforge.infra.redis_subscriber``; 140-190 µs
through redis-py's, which a Cluster, TLS and Sentinel keep), so the API
processes do not hear the push queues' bells and the pusher does not hear
the pull queues' (but for the few rung on both by callers that know a queue
by its name only, see :func:`ring`).

Whoever settles a task (``done``, ``dead`` or ``cancelled``) rings
:func:`ring_settled`: one ``PUBLISH`` per task on its own channel
(:func:`settled_channel`). A process subscribes to a task's channel only while
a request there waits for that task, so a settled task nobody waits for costs
Redis one publish to nobody, and no API process hears of it.

Each API process listens with ONE Redis connection (:class:`Hub`, one per
event loop) and wakes its local waiters, which wait on ``asyncio`` events: a
waiting claim holds no thread, no database connection and no Redis
connection of its own. A bell for n tasks wakes only as many waiters as
can take n tasks (by their ``max_tasks``), not the whole herd.

On a Redis Cluster the bells use sharded pub/sub (``SPUBLISH``/``SSUBSCRIBE``,
Redis 7+): a classic ``PUBLISH`` there is copied to every node of the cluster,
a sharded one only within the shard that serves the channel's slot. Every
channel carries the same hash tag, so all of them live on one shard and a
process still listens through one connection (to that shard's primary).

A lost bell (Redis down, a flush, a race, a failover) costs latency, never a
task: waiters re-check on a timer, shorter while the hub is disconnected.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import redis
import redis.asyncio as aioredis
from django.conf import settings

from taskforge.infra import redis_subscriber
from taskforge.infra.redis import (
    Client,
    Pipeline,
    async_pubsub_client,
    cluster_target,
    database_number,
    is_cluster,
    redis_client,
)

logger = logging.getLogger("taskforge.wakeup")

CHANNEL_PREFIX = "tf:wake:"
SETTLED_PREFIX = "tf:settled:"
#: Re-check interval while the hub is subscribed: only a safety net for a lost bell.
CONNECTED_RECHECK_SECONDS = 5.0
#: Re-check interval while Redis is unreachable (claims then come from Postgres).
DISCONNECTED_RECHECK_SECONDS = 1.0


def channel() -> str:
    """The doorbell channel of this deployment.

    Pub/sub ignores Redis database numbers, so the channel carries the
    database: deployments (or test runs) sharing one Redis server on different
    databases never ring each other's bells. The database is the channel's hash
    tag, which every task channel shares: on a Cluster they all live in one slot.
    """
    return f"{CHANNEL_PREFIX}{{{database_number(settings.REDIS_URL)}}}"


def push_channel() -> str:
    """The doorbell channel of this deployment's push queues (same scoping and hash tag as :func:`channel`)."""
    return f"{channel()}:push"


def settled_channel(task_id: str) -> str:
    """The channel rung when the task is settled (same database scoping and hash tag as :func:`channel`)."""
    return f"{SETTLED_PREFIX}{{{database_number(settings.REDIS_URL)}}}:{task_id}"


def _publish(target: Client | Pipeline, name: str, message: bytes) -> None:
    # A ClusterPipeline is a RedisCluster too: either way, sharded on a Cluster.
    if is_cluster(target):
        target.spublish(name, message)
    else:
        target.publish(name, message)


def ring_settled(task_ids: list[str], pipe: Pipeline) -> None:
    """Queue on ``pipe`` one bell per settled task, for requests waiting on its result."""
    for task_id in task_ids:
        _publish(pipe, settled_channel(task_id), b"")


def ring(queue_name: str, count: int = 0, *, push: bool | None, pipe: Pipeline | None = None) -> None:
    """Tell the processes that take the queue's tasks that ``count`` (0: some) became claimable.

    ``push`` says whether it is a push queue (the pusher's bell) or a pull
    queue (the API processes' bell). None, from callers that know the queue
    by its name only (the scheduler's Redis-only fast tier, promotions), rings
    both: those ring once per queue and batch, not once per task, so the
    listener that does not need it pays little, and a lookup would put a
    Postgres query where there was none. With ``pipe``, the bells are only
    queued on it: they ring when the caller executes the pipeline, after the
    commands queued before them. (On a Cluster the pipeline's commands for
    other nodes travel on other connections, so a bell may reach a waiter a
    moment before the lane write it follows; the waiter then finds the task
    through Postgres.)
    """
    message = f"{count} {queue_name}".encode()
    names = [channel(), push_channel()] if push is None else [push_channel() if push else channel()]
    if pipe is not None:
        for name in names:
            _publish(pipe, name, message)
        return
    try:
        own = redis_client().pipeline(transaction=False)  # both bells, when both, in one round trip
        for name in names:
            _publish(own, name, message)
        own.execute()
    except redis.RedisError:
        logger.warning("redis unavailable: long-poll wakeup skipped", extra={"queue": queue_name})


def _parse(message: bytes) -> tuple[str, int]:
    count, _, queue_name = message.decode(errors="replace").partition(" ")
    try:
        return queue_name, int(count)
    except ValueError:
        return queue_name, 0


#: A live subscription: the loop's own protocol's, or redis-py's.
Subscription = redis_subscriber.Subscriber | aioredis.client.PubSub


async def _subscribe(pubsub: Subscription, channels: list[str], *, sharded: bool, stop: bool = False) -> None:
    """(Un)subscribe ``channels``: sharded pub/sub on a Cluster, classic pub/sub elsewhere."""
    if sharded:
        assert isinstance(pubsub, aioredis.client.PubSub)  # a Cluster's subscription is redis-py's
        await (pubsub.sunsubscribe(*channels) if stop else pubsub.ssubscribe(*channels))
    else:
        await (pubsub.unsubscribe(*channels) if stop else pubsub.subscribe(*channels))


@dataclass(eq=False)
class Waiter:
    queue_name: str | None  # None: any queue
    max_tasks: int
    # Set: a request waiting for this task to settle, woken only by its bell (never by a claim bell).
    task_id: str | None = None
    event: asyncio.Event = field(default_factory=asyncio.Event)


class Hub:
    """One process's subscription to a doorbell channel, shared by all its waiters.

    The API processes' hubs hear the pull queues' bells (:func:`channel`) and
    follow the task channels of results waited for; the pusher's hears the
    push queues' bells (:func:`push_channel`).
    """

    def __init__(self, *, push: bool = False) -> None:
        self.push = push
        self.waiters: list[Waiter] = []
        self.connected = False
        # Set once the first subscription attempt has succeeded or failed.
        self._settled = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # The live subscription (while connected): task channels are added and dropped on it.
        self._pubsub: Subscription | None = None
        # The channel of the claim bells, as messages name it.
        self._claims_bytes = b""
        # Whether it is sharded pub/sub (on a Cluster).
        self._sharded = False
        # Claim bells heard, and changes of the subscription (see mark()).
        self._heard = 0

    def mark(self) -> int | None:
        """Where the hub's hearing stands now, to ask :meth:`heard_nothing_since` later; None: not listening.

        A claim takes a mark before its first attempt: if, once it waits, the
        hub has been listening all along and has heard no claim bell since,
        no task can have arrived unheard meanwhile (a task is announced after
        its commit, so one committed before the attempt read was there to be
        claimed), and the claim waits for the next bell instead of trying
        again at once.
        """
        return self._heard if self.connected else None

    def heard_nothing_since(self, mark: int | None) -> bool:
        return mark is not None and self.connected and self._heard == mark

    @property
    def recheck_seconds(self) -> float:
        return CONNECTED_RECHECK_SECONDS if self.connected else DISCONNECTED_RECHECK_SECONDS

    @contextlib.asynccontextmanager
    async def waiter(
        self, queue_name: str | None, max_tasks: int, *, task_id: str | None = None
    ) -> AsyncIterator[Waiter]:
        """Register a waiter; on entry the hub is subscribed (or known to be down).

        Callers claim (or read the task) once more after entering: a bell that
        rang between their first attempt and the registration is otherwise lost.
        With ``task_id`` the waiter waits for that task to settle, and the hub
        listens on the task's channel while anyone here waits for it.
        """
        waiter = Waiter(queue_name, max_tasks, task_id)
        self.waiters.append(waiter)
        self._ensure_listening()
        try:
            if not self._settled.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._settled.wait(), timeout=3.0)
            if task_id is not None:
                await self._follow([settled_channel(task_id)])
            yield waiter
        finally:
            self.waiters.remove(waiter)
            if task_id is not None and not any(w.task_id == task_id for w in self.waiters):
                await self._follow([settled_channel(task_id)], stop=True)

    async def aclose(self) -> None:
        """Stop listening (a process that closes its event loop: the pusher at shutdown)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _followed(self) -> set[str]:
        return {settled_channel(w.task_id) for w in self.waiters if w.task_id is not None}

    async def _follow(self, channels: list[str], *, stop: bool = False) -> None:
        """(Un)subscribe task channels on the live subscription; while down, the reconnect subscribes them."""
        pubsub = self._pubsub
        if pubsub is None or not channels:
            return
        try:
            await _subscribe(pubsub, channels, sharded=self._sharded, stop=stop)
        except (redis.RedisError, OSError):
            pass  # the listener notices the broken connection and resubscribes what is followed then

    def _ensure_listening(self) -> None:
        if self._task is None or self._task.done():
            # A clean context: the listener outlives the request that started it.
            self._task = asyncio.get_running_loop().create_task(self._listen(), context=contextvars.Context())

    async def _listen(self) -> None:
        backoff = 0.2
        while True:
            claims = push_channel() if self.push else channel()
            client: aioredis.Redis | None = None
            subscription: Subscription | None = None
            try:
                sharded = cluster_target(settings.REDIS_URL) is not None
                client = await async_pubsub_client(claims, socket_connect_timeout=2, health_check_interval=15)
                followed = self._followed()
                self._claims_bytes = claims.encode()
                # A single server's subscription is read by the loop's own protocol (each bell handled
                # as it arrives); a Cluster's sharded one, TLS and Sentinel stay with redis-py's.
                own = None
                if not sharded:
                    own = await redis_subscriber.subscribe(
                        client.connection_pool, [claims, *followed], self._heard_message
                    )
                if own is None:
                    subscription = client.pubsub()
                    await _subscribe(subscription, [claims, *followed], sharded=sharded)
                else:
                    subscription = own
                self._pubsub, self._sharded = subscription, sharded
                self.connected = True
                self._heard += 1
                self._settled.set()
                backoff = 0.2
                # Waiters that arrived while we subscribed.
                await self._follow(sorted(self._followed() - followed))
                # Bells may have rung while we were not listening.
                self._wake_all()
                if own is not None:
                    await own.lost  # raises: why the subscription ended
                else:
                    await self._read(subscription)  # type: ignore[arg-type]  # redis-py's PubSub here
            except (redis.RedisError, OSError) as exc:
                if self.connected:
                    logger.warning("doorbell subscription lost: %s", exc, extra={"event": "wakeup.disconnected"})
                self.connected = False
                self._heard += 1
                self._pubsub = None
                self._settled.set()
                self._wake_all()  # let waiters fall back to polling Postgres
            finally:
                if isinstance(subscription, redis_subscriber.Subscriber):
                    subscription.close()
                elif subscription is not None:
                    with contextlib.suppress(Exception):
                        await subscription.aclose()  # type: ignore[no-untyped-call]
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.aclose()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _read(self, pubsub: aioredis.client.PubSub) -> None:
        """Hand redis-py's subscription's messages to :meth:`_heard_message` until it fails."""
        # Subscribe confirmations are read too: a Cluster ends a sharded
        # subscription when its slot moves, and says so only that way.
        while True:
            message = await pubsub.get_message(timeout=30.0)
            if message is None:
                continue
            kind = message.get("type")
            if kind in ("message", "smessage"):
                self._heard_message(message["channel"], message["data"])
            elif kind in ("unsubscribe", "sunsubscribe") and message["channel"] == self._claims_bytes:
                raise redis.ConnectionError("the doorbell channel's slot moved to another node")

    def _heard_message(self, channel_name: bytes, data: bytes) -> None:
        if channel_name == self._claims_bytes:
            self._heard += 1
            self._wake(*_parse(data))
        else:
            self._wake_task(channel_name.decode().rpartition(":")[2])

    def _wake(self, queue_name: str, count: int) -> None:
        budget = count if count > 0 else None
        for waiter in self.waiters:
            if waiter.task_id is not None or waiter.queue_name not in (None, queue_name) or waiter.event.is_set():
                continue
            waiter.event.set()
            if budget is not None:
                budget -= waiter.max_tasks
                if budget <= 0:
                    return

    def _wake_task(self, task_id: str) -> None:
        for waiter in self.waiters:
            if waiter.task_id == task_id:
                waiter.event.set()

    def _wake_all(self) -> None:
        for waiter in self.waiters:
            waiter.event.set()


_hubs: dict[bool, weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub]] = {
    push: weakref.WeakKeyDictionary() for push in (False, True)
}


def hub(*, push: bool = False) -> Hub:
    """The running event loop's hub of the pull queues' bells, or of the push queues' with ``push``.

    A server has one loop; tests make many.
    """
    hubs = _hubs[push]
    loop = asyncio.get_running_loop()
    found = hubs.get(loop)
    if found is None:
        found = hubs[loop] = Hub(push=push)
    return found
