"""The worker's log lines: one JSON object per line (or text for a terminal), each an event.

Every line the worker writes carries ``event`` (``task.start``,
``task.acked``, ``claim.error``...) and ``worker_id``, plus ``task_id``,
``queue`` and ``attempt`` when it is about a task: the fields people filter
on when they search the logs.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime
from typing import Any

from taskforge_client.worker.job import Job

__all__ = ["LOGGER_NAME", "EventLog", "JsonLines", "TextLines", "configure_logging"]

LOGGER_NAME = "taskforge.worker"

_RECORD_FIELDS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonLines(logging.Formatter):
    """One JSON object per line: time, level, message and the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in record.__dict__.items() if k not in _RECORD_FIELDS})
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextLines(logging.Formatter):
    """``time level message key=value ...`` for people reading a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{k}={v}" for k, v in record.__dict__.items() if k not in _RECORD_FIELDS)
        text = f"{self.formatTime(record)} {record.levelname:<7} {record.getMessage()} {extra}".rstrip()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure_logging(log_format: str, level: str = "INFO") -> None:
    """Send every log line to stdout in ``log_format`` (``json`` or ``text``)."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonLines() if log_format == "json" else TextLines())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # One line per request from httpx (several per request from httpcore, at DEBUG) would drown the task lines.
    for library in ("httpx", "httpcore"):
        logging.getLogger(library).setLevel(logging.WARNING)


class EventLog:
    """Writes the worker's events, with its id on every line and a task's fields on a task's lines."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._logger = logging.getLogger(LOGGER_NAME)

    def __call__(self, level: int, event: str, message: str, job: Job | None = None, **fields: Any) -> None:
        if not self._logger.isEnabledFor(level):
            return  # a task's DEBUG lines cost one check when they are not written
        extra: dict[str, Any] = {"event": event, "worker_id": self.worker_id}
        if job is not None:
            extra.update(task_id=job.id, queue=job.queue, attempt=job.attempts)
        extra.update(fields)
        self._logger.log(level, message, extra=extra)
