"""Request bodies as the contract spells them, shared by the client and the batching producer."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

Json = dict[str, Any]


def _timestamp(value: datetime | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        # TaskForge refuses naive timestamps; say so before the round trip.
        raise ValueError("scheduled_at must be timezone-aware (naive datetimes are ambiguous)")
    return value.isoformat()


def enqueue_body(
    payload: Mapping[str, Any],
    *,
    priority: int | None = None,
    scheduled_at: datetime | str | None = None,
    idempotency_key: str | None = None,
    max_retries: int | None = None,
    kind: str | None = None,
    timeout_seconds: int | None = None,
) -> Json:
    """One enqueue body as the contract spells it: the options given, none of those left out."""
    body: Json = {"payload": payload if type(payload) is dict else dict(payload)}
    optional = {
        "priority": priority,
        "scheduled_at": _timestamp(scheduled_at),
        "idempotency_key": idempotency_key,
        "max_retries": max_retries,
        "kind": kind,
        "timeout_seconds": timeout_seconds,
    }
    body.update({name: value for name, value in optional.items() if value is not None})
    return body
