"""What the task list's search box understands, as payload containments (``payload @> ...``).

``user_id=abc123`` finds tasks whose payload has ``"user_id": "abc123"``;
``user.id=42`` looks one level down (``{"user": {"id": ...}}``). A value that
reads as a JSON number, ``true``, ``false`` or ``null`` also matches that
value, since the box cannot know whether a producer sent ``42`` or ``"42"``.
Anything else (a bare id, an idempotency key, a kind) is not a payload search.
"""

from __future__ import annotations

import json
from typing import Any

MAX_PATH_DEPTH = 8


def payload_containments(term: str) -> list[dict[str, Any]]:
    """The containments ``term`` asks for (any one matching is a match); empty when it is no ``key=value``."""
    path, separator, raw = term.partition("=")
    keys = path.strip().split(".")
    if not separator or not all(key.strip() for key in keys) or len(keys) > MAX_PATH_DEPTH or "\x00" in term:
        return []
    keys = [key.strip() for key in keys]
    value = raw.strip()
    candidates: list[Any] = [value]
    try:
        typed = json.loads(value)
    except ValueError:
        typed = value
    if typed is None or isinstance(typed, bool | int | float):
        candidates.append(typed)
    return [_nested(keys, candidate) for candidate in candidates]


def _nested(keys: list[str], value: Any) -> dict[str, Any]:
    for key in reversed(keys):
        value = {key: value}
    return value
