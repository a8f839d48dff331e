"""Checking a validation shortcut against the serializer it stands in front of."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def agreeing(shortcut: Callable[[Any], dict[str, Any] | None], serializer_class: type, bodies: Iterable[Any]) -> int:
    """How many of ``bodies`` the shortcut took; each it took, the serializer accepts with the same result."""
    accepted = 0
    for body in bodies:
        quick = shortcut(body)
        if quick is None:
            continue  # left to the serializer, which decides alone
        accepted += 1
        serializer = serializer_class(data=body)
        assert serializer.is_valid(), (body, serializer.errors)
        assert quick == dict(serializer.validated_data), body
    return accepted
