"""What a delivery's answer means for its task: pure functions, unit-tested alone.

* any 2xx: the attempt succeeded (an ack); a JSON-object body (read whole, at most 64 KiB)
  becomes the task's ``result``;
* 429 or 503 with a usable ``Retry-After``: retry after that many seconds (capped at one day);
* anything else (another status, a redirect, a timeout, a connection error, a refused target):
  a failed attempt with the queue's backoff, ``max_retries`` and DLQ.

``last_error`` names the status or the error and the first 200 bytes of the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from rest_framework.exceptions import ParseError

from queues.push.delivery import Answer
from taskforge.http.parsers import parse_json_object

#: The longest Retry-After honoured, in seconds.
MAX_RETRY_AFTER_SECONDS = 86_400
#: How much of an answer's body ``last_error`` quotes.
QUOTED_BYTES = 200
RETRY_AFTER_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class Succeeded:
    result: dict[str, Any] | None


@dataclass(frozen=True)
class Failed:
    error: str
    #: seconds the receiver asked to wait (429/503 with Retry-After); None: the queue's backoff
    retry_after_seconds: int | None = None


Outcome = Succeeded | Failed


def metric_label(answer: Answer) -> str:
    """The ``outcome`` label of ``taskforge_push_deliveries_total``: 2xx, 3xx, 4xx, 5xx or the failure kind."""
    if answer.kind != "answered" or answer.status is None:
        return answer.kind
    return f"{min(max(answer.status // 100, 1), 5)}xx"


def quoted(body: bytes) -> str:
    """The first 200 bytes of an answer, as text Postgres can store (no NUL)."""
    return body[:QUOTED_BYTES].decode("utf-8", "replace").replace("\x00", "\ufffd")


def retry_after_seconds(value: str | None, now: datetime | None = None) -> int | None:
    """A ``Retry-After`` header as whole seconds (delay or HTTP date), capped at a day; None if unusable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return min(int(value), MAX_RETRY_AFTER_SECONDS)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(math.ceil(seconds), 0), MAX_RETRY_AFTER_SECONDS)


def result_of(answer: Answer) -> dict[str, Any] | None:
    """The task's result: the body when it is a whole JSON object Postgres can store, else None."""
    if answer.truncated or not answer.body:
        return None
    try:
        return parse_json_object(answer.body)
    except ParseError:
        return None


def _with_body(head: str, body: str) -> str:
    return f"{head}: {body}" if body else head


def outcome(answer: Answer) -> Outcome:
    if answer.kind != "answered" or answer.status is None:
        return Failed(answer.error or answer.kind)
    status = answer.status
    if 200 <= status < 300:
        return Succeeded(result_of(answer))
    body = quoted(answer.body)
    if 300 <= status < 400:
        location = answer.headers.get("location", "")
        return Failed(_with_body(f"HTTP {status} (redirect to {location!r}, not followed)", body))
    wait = retry_after_seconds(answer.headers.get("retry-after")) if status in RETRY_AFTER_STATUSES else None
    return Failed(_with_body(f"HTTP {status}", body), wait)
