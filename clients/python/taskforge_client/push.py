"""Verifying TaskForge's push deliveries (the receiving end of a push queue).

Each delivery carries ``TaskForge-Timestamp`` (Unix seconds) and ``TaskForge-Signature``:
one or more comma-separated ``v1=<hex>`` entries, hex being HMAC-SHA256 keyed with the queue's
push secret over ``timestamp + "." + task_id + "." + body``. There are two entries during the
grace period after a rotation (new secret first), so a receiver that knows either secret accepts
the delivery. A timestamp further than ``tolerance_seconds`` from now is refused: an old
delivery captured and sent again (a replay) fails even with a valid signature.

``taskforge_client.django_push.verified_push`` wraps a Django view with this check.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping

DEFAULT_TOLERANCE_SECONDS = 300


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def expected_signature(secret: str, timestamp: str, task_id: str, body: bytes) -> str:
    signed = f"{timestamp}.{task_id}.".encode() + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_problem(
    headers: Mapping[str, str],
    body: bytes,
    secrets: str | Iterable[str],
    *,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> str | None:
    """Why the delivery is not authentic, or None when it is."""
    known = [secrets] if isinstance(secrets, str) else list(secrets)
    timestamp = _header(headers, "TaskForge-Timestamp")
    task_id = _header(headers, "TaskForge-Task-Id")
    signature = _header(headers, "TaskForge-Signature")
    if not timestamp or not task_id or not signature:
        return "missing TaskForge-Timestamp, TaskForge-Task-Id or TaskForge-Signature"
    if not timestamp.isdigit():
        return "TaskForge-Timestamp is not Unix seconds"
    if abs((time.time() if now is None else now) - int(timestamp)) > tolerance_seconds:
        return f"TaskForge-Timestamp is more than {tolerance_seconds} s away from now (a replay?)"
    offered = [part.strip()[3:] for part in signature.split(",") if part.strip().startswith("v1=")]
    for secret in known:
        wanted = expected_signature(secret, timestamp, task_id, body)
        if any(hmac.compare_digest(wanted, candidate) for candidate in offered):
            return None
    return "no v1 signature matches a known secret"


def verify_signature(
    headers: Mapping[str, str],
    body: bytes,
    secrets: str | Iterable[str],
    *,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
) -> bool:
    """Whether a delivery is authentic and recent: a ``v1`` signature by one of ``secrets``,
    timestamped within ``tolerance_seconds`` of now. ``body`` is the raw request body."""
    return signature_problem(headers, body, secrets, tolerance_seconds=tolerance_seconds) is None
