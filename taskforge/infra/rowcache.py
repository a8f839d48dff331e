"""Process-local copies of the rows nearly every request reads: API keys and queues.

Every API request authenticates a key, and most look a queue up by name; both
rows change rarely (a key is created or revoked; a queue is created, edited,
paused or deleted). Each process keeps the rows it has read, tagged with the
value of one generation counter in Redis. A change in any process bumps the
counter once it commits and announces it on a channel every process listens
to (:mod:`taskforge.infra.change_watch`), so every process stops using its
copies at once.

While its watch listens, a process tags copies with the watch's tag and asks
Redis nothing; otherwise (starting, Redis down, a Cluster) the counter is read
once per request (the first lookup in it; see :func:`request_scope`): one
Redis GET instead of a Postgres query per row. Without Redis nothing is
cached. ``MAX_AGE_SECONDS`` bounds a copy's life even if a change's
announcement is lost (a Redis flush may bring back a counter value it had
before).
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from django.db import transaction

from taskforge.infra import change_watch
from taskforge.infra.redis import redis_client

logger = logging.getLogger("taskforge.infra.rowcache")

MAX_AGE_SECONDS = 5.0
GENERATION_KEY = "tf:config:generation"
# Bound the memory an unlucky process can spend on copies (oldest dropped first).
MAX_ENTRIES = 10_000


_UNKNOWN = object()
_OUTSIDE_REQUEST = object()
_NOT_READ_YET = object()
# The generation read in this request (outside a request: read at every lookup).
_request_generation: contextvars.ContextVar[object] = contextvars.ContextVar("tf_generation", default=_OUTSIDE_REQUEST)
_caches: list[RowCache[Any]] = []


# Inside cached_only(): a lookup that would ask Postgres or Redis raises NotCached instead.
_cached_only: contextvars.ContextVar[bool] = contextvars.ContextVar("tf_cached_only", default=False)


class NotCached(Exception):
    """A lookup inside :func:`cached_only` needed Postgres or Redis (the row is not held, or not trusted)."""


@contextmanager
def cached_only() -> Iterator[None]:
    """Lookups in this block answer from this process's copies or raise :class:`NotCached`.

    For code on the event loop (``queues.api.hot``), which must not wait on a
    blocking query: on a miss it hands the request to the thread pool, where
    the same lookup may load the row.
    """
    token = _cached_only.set(True)
    try:
        yield
    finally:
        _cached_only.reset(token)


class RowCache[T]:
    """Rows by key, each loaded by ``load`` (which returns None for "no such row").

    Only rows that exist are kept: unknown keys cannot fill the cache, and a
    row created later is found at once.
    """

    def __init__(self, load: Callable[[str], T | None]) -> None:
        self._load = load
        self._entries: dict[str, tuple[T, object, float]] = {}
        _caches.append(self)

    def get(self, key: str) -> T | None:
        generation = current_generation()
        now = time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and generation is not _UNKNOWN and hit[1] == generation and hit[2] > now:
            return hit[0]
        if _cached_only.get():
            raise NotCached(key)
        row = self._load(key)
        if row is None or generation is _UNKNOWN:
            self._entries.pop(key, None)
        else:
            if len(self._entries) >= MAX_ENTRIES:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = (row, generation, now + MAX_AGE_SECONDS)
        return row

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


def current_generation() -> object:
    memo = _request_generation.get()
    if memo is not _OUTSIDE_REQUEST and memo is not _NOT_READ_YET:
        return memo
    watch = change_watch.current()
    generation = watch.heard() if watch is not None else None
    if generation is None:
        if _cached_only.get():
            raise NotCached(GENERATION_KEY)
        try:
            generation = redis_client().get(GENERATION_KEY)
        except redis.RedisError:
            generation = _UNKNOWN
    if memo is _NOT_READ_YET:
        _request_generation.set(generation)
    return generation


@contextmanager
def request_scope() -> Iterator[None]:
    """Read the generation at most once while this block runs (one request)."""
    token = _request_generation.set(_NOT_READ_YET)
    try:
        yield
    finally:
        _request_generation.reset(token)


def changed() -> None:
    """A key or a queue changed: drop this process's copies now, every process's at commit."""
    clear_all()

    def bump() -> None:
        clear_all()  # also what this process read while the change was not yet committed
        try:
            change_watch.announce(redis_client(), GENERATION_KEY)
        except redis.RedisError:
            logger.warning("redis unavailable: cached keys and queues expire within %ss", MAX_AGE_SECONDS)

    transaction.on_commit(bump)


def clear_all() -> None:
    for cache in _caches:
        cache.clear()
