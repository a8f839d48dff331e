"""One delivery: a ``POST`` of a task's payload to its queue's URL, and what came back.

Runs on the pusher's event loop with one shared pool of keep-alive connections
(``queues.push.connections``; at most ``TASKFORGE_PUSHER_CONCURRENCY`` open). Nothing here
touches the database; what the answer means for the task is ``queues.push.outcomes``'s
business, and recording it the lifecycle's.

* The whole attempt (connect, send, answer, body) has the queue's ``timeout_seconds``.
* Redirects are never followed (an answer like any other); TLS certificates are verified.
* At most 64 KiB of an answer is read: a receiver cannot make the pusher hold more.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import certifi
import orjson

from queues.push import signing
from queues.push.connections import ConnectionFailed, ConnectionPool, Target
from queues.push.targets import TargetRefused

#: The most of an answer's body that is read (and that can become the task's result).
MAX_ANSWER_BYTES = 64 * 1024
USER_AGENT = "TaskForge-Pusher/1"


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
    """The pusher's HTTP side: one bounded pool of keep-alive connections to vetted addresses."""

    def __init__(self, *, max_connections: int, allow_private: bool) -> None:
        context = ssl.create_default_context(cafile=certifi.where())
        self.pool = ConnectionPool(max_connections=max_connections, allow_private=allow_private, ssl_context=context)
        self._targets: dict[str, Target] = {}

    async def close(self) -> None:
        self.pool.close()

    async def deliver(self, delivery: Delivery) -> Answer:
        started = time.monotonic()
        body = encode_payload(delivery.payload)
        headers = request_headers(delivery, body, int(time.time()))
        try:
            async with asyncio.timeout(delivery.timeout_seconds):
                response = await self.pool.post(self._target(delivery.url), headers, body, MAX_ANSWER_BYTES)
        except TimeoutError:
            return Answer("timeout", time.monotonic() - started, error=f"timed out after {delivery.timeout_seconds} s")
        except TargetRefused as exc:
            return Answer("refused", time.monotonic() - started, error=f"refused: {exc}")
        except (ConnectionFailed, OSError) as exc:
            detail = str(exc) or type(exc).__name__
            return Answer("connection_error", time.monotonic() - started, error=f"connection error: {detail}")
        return Answer(
            "answered",
            time.monotonic() - started,
            status=response.status,
            headers=response.headers,
            body=response.body,
            truncated=response.truncated,
        )

    def _target(self, url: str) -> Target:
        # A queue's URL is parsed once, not per delivery.
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) > 1000:
                self._targets.clear()
            target = self._targets[url] = Target.of(url)
        return target
