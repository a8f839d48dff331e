"""Log formatters: one JSON object per line (default) or human-readable text.

``DJANGO_LOG_FORMAT`` picks one in settings. Both carry the request id of
the request being served, when there is one (``taskforge.middleware``).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from pythonjsonlogger.orjson import OrjsonFormatter as _JsonFormatter


def _iso_utc(record: logging.LogRecord) -> str:
    """ISO 8601 in UTC with milliseconds: sorts as text, and lines from several processes interleave right."""
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class JsonFormatter(_JsonFormatter):
    """``ts``, ``level``, ``logger``, ``message``, then the record's extras (``event``, ``task_id`` ...)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _iso_utc(record)


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger message [request_id]`` for people reading a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _iso_utc(record)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request_id = getattr(record, "request_id", None)
        return f"{line} [{request_id}]" if request_id else line
