"""Log formatters: one JSON object per line (default) or human-readable text.

``DJANGO_LOG_FORMAT`` picks one in settings. Both carry the request id of
the request being served, when there is one (``taskforge.http.middleware``).

A record may carry a ``batch`` of ``(message, fields)`` pairs (see
:func:`log_batch`): it is written as one line per pair, each line what a
record of its own would have been. A 100-task batch then costs one record,
not 100 (``make bench`` counted 15% of a batch enqueue's CPU in per-line
records).
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import Any

import orjson
from pythonjsonlogger.orjson import OrjsonFormatter as _JsonFormatter

# What LogRecord would otherwise find out for every record and no TaskForge line
# prints: the caller's file and line (a walk up the stack), the thread's and the
# multiprocessing process' names and the asyncio task. Tracebacks are unaffected;
# the process id stays (gunicorn's own log lines print it). These are the switches
# the logging HOWTO's "Optimization" section names; about 10 us a record.
logging._srcfile = None
logging.logThreads = False
logging.logMultiprocessing = False
logging.logAsyncioTasks = False  # type: ignore[attr-defined]  # Python 3.12+, not in the stubs yet


# The whole second last stamped and its text up to the milliseconds: a busy process writes many
# lines a second, and building the whole date for each took 3.5 us a line (0.6 us this way).
_second_stamped: tuple[int, str] = (-1, "")


def _iso_utc(record: logging.LogRecord) -> str:
    """ISO 8601 in UTC with milliseconds: sorts as text, and lines from several processes interleave right.

    The same text as ``datetime.fromtimestamp(created, UTC)`` would give
    (microseconds rounded half to even, as it rounds them).
    """
    global _second_stamped
    second, fraction = divmod(record.created, 1.0)
    whole = int(second)
    micro = round(fraction * 1e6)
    if micro >= 1_000_000:  # rounded up into the next second
        whole, micro = whole + 1, micro - 1_000_000
    stamped, text = _second_stamped
    if stamped != whole:
        text = datetime.fromtimestamp(whole, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        _second_stamped = (whole, text)
    return f"{text}{micro // 1000:03d}Z"


Batch = list[tuple[str, dict[str, Any]]]


def log_batch(logger: logging.Logger, level: int, batch: Batch) -> None:
    """Log one line per ``(message, fields)``: the same lines as one record each, for the cost of one."""
    if batch and logger.isEnabledFor(level):
        logger.log(level, "%d line(s)", len(batch), extra={"batch": batch})


def log_line(logger: logging.Logger, level: int, message: str, fields: dict[str, Any]) -> None:
    """Log one line whose message is final and whose fields are JSON-ready, as a batch of one.

    The formatters write it as a record with ``fields`` as extras would be
    written, without the general extras pass (pythonjsonlogger's walk over
    every record attribute, about 20 us a line); other handlers still see the
    message and the fields as the record's own (so, as with ``extra``, no
    field may be named like a ``LogRecord`` attribute).
    """
    if logger.isEnabledFor(level):
        logger.log(level, "%s", message, extra={**fields, "batch": [(message, fields)]})


class JsonFormatter(_JsonFormatter):
    """``ts``, ``level``, ``logger``, ``message``, then the record's extras (``event``, ``task_id`` ...)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _iso_utc(record)

    def format(self, record: logging.LogRecord) -> str:
        batch: Batch | None = getattr(record, "batch", None)
        if batch is None:
            return super().format(record)
        head = {"ts": _iso_utc(record), "level": record.levelname, "logger": record.name}
        tail = {"request_id": getattr(record, "request_id", None)}
        return "\n".join(
            orjson.dumps({**head, "message": message, **fields, **tail}, default=str).decode()
            for message, fields in batch
        )


# Characters that would break a text line or fake the start of another: C0 and
# C1 controls (newline, carriage return, escape ...) and Unicode line separators.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _escape_controls(text: str) -> str:
    return _CONTROL.sub(_escaped, text)


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger message [request_id]`` for people reading a terminal.

    A message holds what clients send (request paths, worker ids, usernames):
    its control characters are escaped (``\\x0a``), so one record is one line
    and nobody can forge a line. A traceback keeps its own lines.
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _iso_utc(record)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return _escape_controls(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        batch: Batch | None = getattr(record, "batch", None)
        if batch is None:
            return self._with_request_id(record, super().format(record))
        head = f"{_iso_utc(record)} {record.levelname:<7} {record.name}"
        return "\n".join(self._with_request_id(record, f"{head} {_escape_controls(message)}") for message, _ in batch)

    @staticmethod
    def _with_request_id(record: logging.LogRecord, line: str) -> str:
        request_id = getattr(record, "request_id", None)
        return f"{line} [{request_id}]" if request_id else line
