"""Array parameters written as Postgres array literals, for the statements' ``%(ids)s::uuid[]`` casts.

The lifecycle statements take their rows as arrays (``unnest(%(ids)s::uuid[], ...)``),
one statement for one task or a hundred. psycopg adapts a Python list by
inferring a dumper for it and then for each element, in Python: about 24 µs per
list before a single element is written, so a single enqueue (ten arrays of
one element) spent a quarter of a millisecond of API CPU there (``make bench``,
CALLS), more than the rest of the statement. Written here as the text Postgres
parses for an array (``{"a","b",NULL}``), each list is one ``str.join``, and the
cast in the statement reads it back as the array it was: the statements, their
plans and what they return stay as they were.

The literal's rules (Postgres' "Array Value Input"): a quoted element is taken
as it is, except that ``"`` and ``\\`` are escaped with a backslash; an unquoted
``NULL`` is the null value. Every element that is not a number or a UUID is
quoted, so no text can end an element, open a nested array or read as NULL.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
from psycopg.types.json import Jsonb


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _element(value: Any) -> str:
    # Exact types first: bool is an int, and a bool element goes to a boolean[].
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int | uuid.UUID):
        return str(value)
    if isinstance(value, str):
        return _quoted(value)
    if isinstance(value, Jsonb):
        return _quoted(orjson.dumps(value.obj).decode())
    if isinstance(value, datetime):
        return _quoted(value.isoformat())
    raise TypeError(f"no array literal for a {type(value).__name__}")


def array_literal(values: Sequence[Any]) -> str:
    """``values`` as a Postgres array literal: ``[id, None]`` -> ``{3f2c...,NULL}``."""
    return "{" + ",".join(map(_element, values)) + "}"


def literal_arrays(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with every list written as an array literal (the statement casts it back)."""
    return {name: array_literal(value) if isinstance(value, list) else value for name, value in params.items()}
