"""The failed-attempt outcome of a task asked to stop, and the time-limit error (queues.lifecycle.decide)."""

from __future__ import annotations

from typing import Any

import pytest

from queues.lifecycle.decide import failed_attempt_outcome, retry_or_dead, timed_out_error
from queues.models import Status


def _row(**overrides: Any) -> dict[str, Any]:
    return {"attempts": 1, "max_retries": 3, "retry_base_ms": 1000, "retry_max_delay_ms": 60_000, **overrides}


@pytest.mark.parametrize("attempts", [1, 4])  # attempts left, and none left
@pytest.mark.parametrize("wants_retry", [True, False])
def test_a_task_asked_to_stop_is_cancelled_whatever_else_holds(attempts, wants_retry):
    row = _row(attempts=attempts, cancel_requested=True)
    assert failed_attempt_outcome(row, wants_retry=wants_retry, retry_after_seconds=5) == (Status.CANCELLED, 0)


@pytest.mark.parametrize("row", [_row(), _row(cancel_requested=False), _row(attempts=4, cancel_requested=False)])
def test_otherwise_retry_or_dead_decides(row):
    outcome, delay = failed_attempt_outcome(row, retry_after_seconds=7)
    assert (outcome, delay) == retry_or_dead(row, retry_after_seconds=7)


def test_the_time_limit_error_names_the_limit():
    assert timed_out_error(30) == "execution timed out after 30 s"
