"""What a handler's return or raise becomes: an ack with a result, or a nack with an error.

| the handler                 | the outcome                                              |
| --------------------------- | -------------------------------------------------------- |
| returns a dict or None      | ack, the dict as the task's result                       |
| raises ``Retry(after=s)``   | nack, retried after ``s`` seconds (None: queue backoff)  |
| raises ``Fail``             | nack with ``retry: false``: dead at once                 |
| raises anything else        | nack, ``Type: message`` and the traceback as the error   |

A return value that is not a JSON object is a failed attempt, decided here
before the ack, so one bad result never refuses a whole ack batch. So is a
dict that cannot be sent as JSON (a float NaN, an object json does not know,
a string holding a lone surrogate such as ``"\ud800"`` that UTF-8 cannot
encode): a nack whose error starts ``result is not valid JSON:``, retried
like any failed attempt. Error texts are made encodable the same way
(``\ud800`` written out), so no nack can fail to encode either.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from taskforge_client.outcomes import Fail, Retry
from taskforge_client.worker.flights import Flight

__all__ = [
    "CANCELLED_ERROR",
    "MAX_ERROR_CHARS",
    "InvalidResult",
    "Outcome",
    "cancelled_outcome",
    "describe_exception",
    "outcome_of",
    "sendable_text",
]

MAX_ERROR_CHARS = 8000  # the protocol allows 65536; a traceback's tail is enough
CANCELLED_ERROR = "cancelled on request"


class InvalidResult(ValueError):
    """A handler returned a dict that cannot be sent as JSON."""


@dataclass
class Outcome:
    """How one attempt ended, waiting to be reported (``item()`` is its ack/nack batch item)."""

    flight: Flight
    ack: bool
    result: dict[str, Any] | None = None
    error: str = ""
    retry: bool = True
    retry_after_seconds: int | None = None
    # Handed back without ever starting: the server gives back the attempt its claim counted.
    release: bool = False

    def item(self) -> dict[str, Any]:
        job = self.flight.job
        if self.ack:
            return {"task_id": job.id, "lease_token": job.lease_token, "result": self.result}
        item: dict[str, Any] = {
            "task_id": job.id,
            "lease_token": job.lease_token,
            "error": self.error,
            "retry": self.retry,
            "retry_after_seconds": self.retry_after_seconds,
        }
        if self.release:
            item["release"] = True
        return item


def cancelled_outcome(flight: Flight) -> Outcome:
    """The nack of a task a producer cancelled while it ran: no retry; the server makes it ``cancelled``."""
    return Outcome(flight, ack=False, error=CANCELLED_ERROR, retry=False)


def outcome_of(flight: Flight, call: Callable[[], Any]) -> Outcome:
    """Run ``call`` (the handler on the flight's job) and say how the attempt ended."""
    try:
        return Outcome(flight, ack=True, result=_checked_result(call()))
    except InvalidResult as exc:
        return Outcome(flight, ack=False, error=_own_message(exc))
    except Retry as exc:
        return Outcome(flight, ack=False, error=_own_message(exc), retry_after_seconds=exc.after)
    except Fail as exc:
        return Outcome(flight, ack=False, error=_own_message(exc), retry=False)
    except BaseException as exc:  # a handler's SystemExit must not kill a pool thread either
        return Outcome(flight, ack=False, error=describe_exception(exc))


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` on the first line (the dashboard's summary), then the traceback's tail."""
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    headline = f"{name}: {exc}" if str(exc) else name
    trace = "".join(traceback.format_exception(exc))
    room = MAX_ERROR_CHARS - len(headline) - 2
    return sendable_text(headline if room <= 0 else f"{headline}\n\n{trace[-room:]}")


def sendable_text(text: str) -> str:
    """``text`` with whatever UTF-8 cannot encode (lone surrogates) written as ``\\udXXX`` escapes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _checked_result(value: Any) -> dict[str, Any] | None:
    """A handler's return value must be a JSON object (or None): check it before the ack."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"handler returned {type(value).__name__}; expected a dict (JSON object) or None")
    result = dict(value)
    try:
        # Encoded as the ack will be (UTF-8 text, no NaN): an error here is a failed attempt, not a failed batch.
        json.dumps(result, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidResult(f"result is not valid JSON: {exc}") from None
    return result


def _own_message(exc: BaseException) -> str:
    """A ``Retry``/``Fail`` message as the nack's error: the handler chose its words, no traceback."""
    message = str(exc) or type(exc).__name__
    if exc.__cause__ is not None:
        message += f" (caused by {type(exc.__cause__).__name__}: {exc.__cause__})"
    return sendable_text(message[:MAX_ERROR_CHARS])
