"""The lifecycle's decisions that need no database: pure functions, unit-tested alone.

The statements lock rows and apply outcomes; what the outcome is (retry with
which delay, or dead; whether a failed ack is a harmless repeat) is decided
here from the locked rows' values, so every rule of the contract can be tested
with plain dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queues.backoff import backoff_ms
from queues.models import Status

# The history detail of a released task (handed back unstarted, its attempt given back)
# starts with this, so the history tells a hand-back from a failed attempt.
RELEASED_DETAIL_PREFIX = "released: "


def retry_or_dead(
    row: Mapping[str, Any], *, wants_retry: bool = True, retry_after_seconds: int | None = None
) -> tuple[Status, int]:
    """The outcome of a failed attempt and its retry delay in milliseconds.

    ``row`` is a locked task with its queue's backoff settings (``attempts``,
    ``max_retries``, ``retry_base_ms``, ``retry_max_delay_ms``); ``attempts``
    already counts the attempt that just failed.

    1. Out of attempts (``attempts >= 1 + max_retries``), or the worker said
       not to retry: dead, no delay.
    2. The worker asked for a delay: retry after exactly that.
    3. Otherwise: retry after the queue's jittered exponential backoff, where
       retry number n is ``attempts - 1`` (the first retry is n = 0).
    """
    if row["attempts"] >= 1 + row["max_retries"] or not wants_retry:
        return Status.DEAD, 0
    if retry_after_seconds is not None:
        return Status.RETRY, retry_after_seconds * 1000
    return Status.RETRY, backoff_ms(row["attempts"] - 1, row["retry_base_ms"], row["retry_max_delay_ms"])


def failed_attempt_outcome(
    row: Mapping[str, Any],
    *,
    wants_retry: bool = True,
    retry_after_seconds: int | None = None,
    release: bool = False,
) -> tuple[Status, int]:
    """The outcome of a failed attempt (nack or lease expiry) and its retry delay in milliseconds.

    A task whose cancel was requested (``cancel_requested``) is cancelled: the
    producer asked it to stop, so it is neither retried nor sent to the DLQ.
    A released task (``release``: the worker never started it) is retried at
    once, or after ``retry_after_seconds``, whatever its attempts: the claim's
    attempt is given back (``statements.FAIL``), so it was no attempt at all.
    Otherwise :func:`retry_or_dead` decides.
    """
    if row.get("cancel_requested"):
        return Status.CANCELLED, 0
    if release:
        return Status.RETRY, (retry_after_seconds or 0) * 1000
    return retry_or_dead(row, wants_retry=wants_retry, retry_after_seconds=retry_after_seconds)


def is_repeated_ack(row: Mapping[str, Any], *, worker_id: str, lease_token: str | None) -> bool:
    """Whether an ack that moved nothing repeats one that already succeeded.

    The task is done, by this worker, under this lease (or the ack names no
    lease): answering it again with the task is safe, and a worker whose first
    answer got lost on the way back must not be told its lease is lost.
    """
    return (
        row["status"] == Status.DONE
        and row["claimed_by"] == worker_id
        and (lease_token is None or row["lease_token"] == lease_token)
    )


def lease_expired_error(timeout_seconds: float, worker_id: str | None) -> str:
    """The ``last_error`` of a task whose lease ran out, naming the worker that went silent."""
    return f"lease expired: no heartbeat within {timeout_seconds}s (worker {worker_id})"


def timed_out_error(timeout_seconds: int) -> str:
    """The ``last_error`` of an attempt that reached its task's ``timeout_seconds``."""
    return f"execution timed out after {timeout_seconds} s"
