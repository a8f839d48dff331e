"""One delivery: a ``POST`` of a task's payload to its queue's URL, and what came back.

Runs on the pusher's event loop with one shared connection pool (bounded: at most
``TASKFORGE_PUSHER_CONCURRENCY`` connections). Nothing here touches the database; what the
answer means for the task is ``queues.push.outcomes``'s business, and recording it the
lifecycle's.

* The whole attempt (connect, send, answer, body) has the queue's ``timeout_seconds``.
* Redirects are never followed (httpcore does not follow them); TLS certificates are verified.
* At most 64 KiB of an answer is read: a receiver cannot make the pusher hold more.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import certifi
import httpcore
import orjson

from queues.push import signing
from queues.push.targets import TargetRefused, VettingBackend

#: The most of an answer's body that is read (and that can become the task's result).
MAX_ANSWER_BYTES = 64 * 1024
USER_AGENT = "TaskForge-Pusher/1"
#: Connections per httpcore pool (see Deliverer).
POOL_SIZE = 16


@dataclass(frozen=True)
class Delivery:
    """What one attempt sends: the claimed task and its queue's push settings."""

    task_id: str
    queue: str
    attempt: int
    kind: str | None
    payload: Mapping[str, Any]
    url: str
    timeout_seconds: int
    headers: Mapping[str, str]
    secrets: Sequence[str]


@dataclass(frozen=True)
class Answer:
    """What came of one attempt: an HTTP answer, or why there was none."""

    #: ``answered``, ``timeout``, ``connection_error`` or ``refused``
    kind: str
    seconds: float
    status: int | None = None
    #: the answer's headers, names lower-cased (the last of repeated ones)
    headers: Mapping[str, str] = field(default_factory=dict)
    #: at most MAX_ANSWER_BYTES of the body
    body: bytes = b""
    #: whether the body was longer than what was read
    truncated: bool = False
    #: why there was no answer (kind other than ``answered``)
    error: str | None = None


def request_headers(delivery: Delivery, body: bytes, timestamp: int) -> list[tuple[bytes, bytes]]:
    """The contract's headers (after the queue's extra ones, which cannot name them), in send order."""
    headers = {name: value for name, value in delivery.headers.items()}
    given = {name.lower() for name in headers}
    # Defaults the queue's own headers may replace. The pusher reads raw bytes: a compressed
    # answer could not become a result.
    for name, value in (("User-Agent", USER_AGENT), ("Accept-Encoding", "identity")):
        if name.lower() not in given:
            headers[name] = value
    headers.update(
        {
            "Content-Type": "application/json",
            "TaskForge-Task-Id": delivery.task_id,
            "TaskForge-Queue": delivery.queue,
            "TaskForge-Attempt": str(delivery.attempt),
            "TaskForge-Timestamp": str(timestamp),
            "TaskForge-Signature": signing.signature_header(delivery.secrets, timestamp, delivery.task_id, body),
        }
    )
    if delivery.kind:
        headers["TaskForge-Kind"] = delivery.kind
    return [(name.encode("ascii"), value.encode("ascii")) for name, value in headers.items()]


def encode_payload(payload: Mapping[str, Any]) -> bytes:
    """The request body: the payload as compact UTF-8 JSON (the exact bytes that are signed)."""
    return orjson.dumps(payload)


class Deliverer:
    """The pusher's HTTP side: one bounded connection pool, whose connections are vetted."""

    def __init__(self, *, max_connections: int, allow_private: bool) -> None:
        # httpcore's pool looks at every one of its connections (a readability syscall each) for
        # every request it places: with 100 connections a delivery to a receiver that answers at once
        # took ~350 ms (make bench W9: 50 deliveries/s). Pools of at most POOL_SIZE connections,
        # taken in turn, keep that scan short and the total bound the same.
        context = ssl.create_default_context(cafile=certifi.where())
        backend = VettingBackend(allow_private=allow_private)
        sizes = [POOL_SIZE] * (max_connections // POOL_SIZE) + [max_connections % POOL_SIZE]
        self.pools = [
            httpcore.AsyncConnectionPool(
                ssl_context=context,
                max_connections=size,
                max_keepalive_connections=size,
                keepalive_expiry=30.0,
                network_backend=backend,
            )
            for size in sizes
            if size
        ]
        self._turn = itertools.cycle(self.pools)

    async def close(self) -> None:
        for pool in self.pools:
            await pool.aclose()

    async def deliver(self, delivery: Delivery) -> Answer:
        started = time.monotonic()
        body = encode_payload(delivery.payload)
        headers = request_headers(delivery, body, int(time.time()))
        try:
            async with asyncio.timeout(delivery.timeout_seconds):
                return await self._post(delivery, headers, body, started)
        except TimeoutError:
            return Answer("timeout", time.monotonic() - started, error=f"timed out after {delivery.timeout_seconds} s")
        except TargetRefused as exc:
            return Answer("refused", time.monotonic() - started, error=f"refused: {exc}")
        except httpcore.TimeoutException:
            return Answer("timeout", time.monotonic() - started, error=f"timed out after {delivery.timeout_seconds} s")
        except (
            httpcore.NetworkError,
            httpcore.ProtocolError,
            httpcore.UnsupportedProtocol,
            ssl.SSLError,
            OSError,
        ) as exc:
            detail = str(exc) or type(exc).__name__
            return Answer("connection_error", time.monotonic() - started, error=f"connection error: {detail}")

    async def _post(
        self, delivery: Delivery, headers: list[tuple[bytes, bytes]], body: bytes, started: float
    ) -> Answer:
        timeout = float(delivery.timeout_seconds)
        extensions = {"timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}}
        pool = next(self._turn)
        async with pool.stream("POST", delivery.url, headers=headers, content=body, extensions=extensions) as r:
            chunks: list[bytes] = []
            size = 0
            truncated = False
            async for chunk in r.aiter_stream():
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    truncated = True
                    break
            received = b"".join(chunks)[:MAX_ANSWER_BYTES]
            answer_headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in r.headers}
        return Answer(
            "answered",
            time.monotonic() - started,
            status=r.status,
            headers=answer_headers,
            body=received,
            truncated=truncated,
        )
