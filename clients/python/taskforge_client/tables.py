"""Plain-text tables and field lists for the ``taskforge`` command (``taskforge_client.cli``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# A cell longer than this is cut (an error text, a payload): a table row stays one line.
MAX_CELL = 60


def cell(value: Any) -> str:
    """How one value reads in a table: ``-`` for nothing, ``yes``/``no``, timestamps to the second."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value).replace("\n", " ")
    if _is_timestamp(text):
        text = text[:19].replace("T", " ")  # the API's ISO 8601 in UTC, without fractions and offset
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def _is_timestamp(text: str) -> bool:
    return len(text) >= 19 and text[4] == "-" and text[7] == "-" and text[10] == "T" and text[13] == ":"


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns padded to their widest cell, a header line first; ``(none)`` for no rows."""
    cells = [[cell(value) for value in row] for row in rows]
    if not cells:
        return "(none)"
    widths = [max(len(column), *(len(row[i]) for row in cells)) for i, column in enumerate(columns)]
    lines = [columns, *cells]
    return "\n".join(
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def fields(pairs: Mapping[str, Any]) -> str:
    """``name: value`` lines, names aligned."""
    width = max(len(name) for name in pairs)
    return "\n".join(f"{name.ljust(width)}  {cell(value)}" for name, value in pairs.items())
