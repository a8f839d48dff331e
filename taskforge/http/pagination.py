"""Keyset cursors: opaque, stable under inserts, O(page) on big tables."""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson
from rest_framework.exceptions import ParseError, ValidationError

from taskforge.http.fields import parse_aware_datetime
from taskforge.http.parsers import check_json_value

_DIGITS = re.compile(r"[0-9]{1,6}")
# A task kind (queues.models.TASK_KIND_PATTERN; this package imports no app).
_KIND = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def encode_cursor(at: datetime, row_id: uuid.UUID) -> str:
    raw = orjson.dumps([at.isoformat(), str(row_id)])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at, row_id = orjson.loads(base64.urlsafe_b64decode(padded.encode()))
        if not isinstance(row_id, str):
            raise TypeError("cursor id must be a string")  # uuid.UUID(5) raises AttributeError, not ValueError
        return parse_aware_datetime(at), uuid.UUID(row_id)
    except (ValueError, TypeError, binascii.Error, orjson.JSONDecodeError):
        raise ValidationError({"cursor": ["Malformed cursor."]}) from None


class QueryParams:
    """Strict readers for query parameters: a malformed value is a 400 naming it.

    An unknown parameter is a 400 too, as an unknown body field is: a typo
    such as ``?stauts=dead`` must not silently list everything.
    """

    def __init__(self, params: Mapping[str, str], allowed: frozenset[str] | set[str]) -> None:
        self.params = params
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise ValidationError({name: ["Unknown query parameter."] for name in unknown})

    def text(self, name: str, *, max_length: int = 200) -> str | None:
        value = self.params.get(name)
        if value is None:
            return None
        if len(value) > max_length or "\x00" in value:
            raise ValidationError({name: [f"Must be at most {max_length} characters."]})
        return value

    def choice(self, name: str, choices: list[str]) -> str | None:
        value = self.params.get(name)
        if value is not None and value not in choices:
            raise ValidationError({name: [f"Must be one of: {', '.join(choices)}."]})
        return value

    def integer(self, name: str, low: int, high: int, default: int) -> int:
        """An integer from ``low`` to ``high`` written in ASCII digits (no sign, no decimals)."""
        value = self.params.get(name)
        if value is None:
            return default
        if not _DIGITS.fullmatch(value) or not low <= int(value) <= high:
            raise ValidationError({name: [f"Must be an integer between {low} and {high}."]})
        return int(value)

    def kind(self) -> str | None:
        """``kind``: a task kind as enqueue bodies take it (1-128 letters, digits, ``.``, ``_``, ``-``, ``:``)."""
        value = self.params.get("kind")
        if value is not None and not _KIND.fullmatch(value):
            raise ValidationError({"kind": ["Must be 1-128 letters, digits, '.', '_', '-' or ':'."]})
        return value

    def json_object(self, name: str, *, max_length: int = 4096) -> dict[str, Any] | None:
        """A non-empty JSON object written in the parameter (``?payload_contains={"user_id":"abc123"}``)."""
        value = self.params.get(name)
        if value is None:
            return None
        problem = f"Must be a JSON object of at most {max_length} characters naming at least one key."
        if len(value) > max_length:
            raise ValidationError({name: [problem]})
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise ValidationError({name: [problem]}) from None
        if not isinstance(parsed, dict) or not parsed:
            raise ValidationError({name: [problem]})
        try:
            check_json_value(parsed)  # what jsonb cannot hold would be a database error, not a 400
        except ParseError as exc:
            raise ValidationError({name: [str(exc.detail)]}) from None
        return parsed

    def timestamp(self, name: str) -> datetime | None:
        value = self.params.get(name)
        if value is None:
            return None
        try:
            return parse_aware_datetime(value.replace(" ", "+"))  # '+' arrives as ' ' if unescaped
        except ValueError:
            raise ValidationError({name: ["Must be an ISO 8601 timestamp with an offset."]}) from None

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self.params.get(name)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise ValidationError({name: ["Must be true or false."]})

    def limit(self, default: int = 50, maximum: int = 500) -> int:
        value = self.params.get("limit")
        if value is None:
            return default
        # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
        if not _DIGITS.fullmatch(value) or not 1 <= int(value) <= maximum:
            raise ValidationError({"limit": [f"Must be an integer between 1 and {maximum}."]})
        return int(value)

    def cursor(self) -> tuple[datetime, uuid.UUID] | None:
        value = self.params.get("cursor")
        return None if value is None else decode_cursor(value)
