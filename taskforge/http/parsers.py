"""A strict JSON body parser.

Refuses, as a 400, everything Postgres ``jsonb`` cannot store or the contract
forbids: invalid UTF-8, ``NaN``/``Infinity``, lone surrogates (orjson rejects
these), ``\\u0000`` anywhere, nesting deeper than 64 levels, and a top level
that is not an object.
"""

from __future__ import annotations

from typing import Any

import orjson
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.parsers import BaseParser

MAX_DEPTH = 64


def check_json_value(value: Any) -> None:
    """Depth and NUL checks, iteratively (a deep document must not blow the stack)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > MAX_DEPTH:
                raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels")
            for key, child in node.items():
                if "\x00" in key:
                    raise ParseError("JSON must not contain \\u0000")
                stack.append((child, depth + 1))
        elif isinstance(node, list):
            if depth > MAX_DEPTH:
                raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels")
            stack.extend((child, depth + 1) for child in node)
        elif isinstance(node, str) and "\x00" in node:
            raise ParseError("JSON must not contain \\u0000")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ParseError(f"invalid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ParseError("the request body must be a JSON object")
    check_json_value(value)
    return value


class StrictJSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> dict[str, Any]:
        charset = _charset(media_type or "")
        if charset not in (None, "utf-8", "utf8"):
            raise UnsupportedMediaType(media_type or "")
        raw = stream.read() if stream is not None else b""
        if not raw:
            raise ParseError("the request body is empty; a JSON object is expected")
        return parse_json_object(raw)


def _charset(media_type: str) -> str | None:
    for part in media_type.split(";")[1:]:
        name, _, value = part.strip().partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return None
