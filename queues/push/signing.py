"""The ``TaskForge-Signature`` of a delivery (scheme ``v1``).

``v1=<hex>`` where hex is HMAC-SHA256, keyed with the queue's push secret, over
``timestamp + "." + task_id + "." + body`` (the exact bytes sent). During a secret's grace
period the header carries one ``v1=`` entry per signing secret, newest first, comma-separated;
a receiver accepts the delivery when any entry matches a secret it knows. The client package
(``taskforge_client.push``) verifies the same scheme.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

SCHEME = "v1"


def signature(secret: str, timestamp: int, task_id: str, body: bytes) -> str:
    signed = f"{timestamp}.{task_id}.".encode() + body
    # hmac.digest: OpenSSL's one-shot HMAC, without building an HMAC object per delivery.
    return hmac.digest(secret.encode(), signed, hashlib.sha256).hex()


def signature_header(secrets: Sequence[str], timestamp: int, task_id: str, body: bytes) -> str:
    return ",".join(f"{SCHEME}={signature(secret, timestamp, task_id, body)}" for secret in secrets)
