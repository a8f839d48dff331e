"""Retry or dead, and whether a failed ack repeats one that succeeded: decided from a locked row's values alone."""

from __future__ import annotations

from typing import Any

import pytest

from queues.lifecycle.decide import failed_attempt_outcome, is_repeated_ack, lease_expired_error, retry_or_dead
from queues.models import Status


def locked(attempts: int, max_retries: int = 3, base: int = 1000, cap: int = 10**9) -> dict[str, Any]:
    return {"attempts": attempts, "max_retries": max_retries, "retry_base_ms": base, "retry_max_delay_ms": cap}


@pytest.mark.parametrize("attempts", [1, 2, 3])
def test_a_failure_with_attempts_left_is_retried_by_the_backoff(attempts):
    status, delay = retry_or_dead(locked(attempts, max_retries=3))
    n = attempts - 1  # attempts already counts the failed one; the first retry is n = 0
    assert status == Status.RETRY
    assert 1000 * 2**n <= delay <= 1000 * 2**n + 1000


@pytest.mark.parametrize(("attempts", "max_retries"), [(1, 0), (4, 3), (9, 3)])
def test_the_last_allowed_attempt_failing_is_dead_with_no_delay(attempts, max_retries):
    assert retry_or_dead(locked(attempts, max_retries=max_retries)) == (Status.DEAD, 0)


def test_a_worker_that_refuses_the_retry_makes_it_dead_even_with_attempts_left():
    assert retry_or_dead(locked(1, max_retries=10), wants_retry=False) == (Status.DEAD, 0)
    # retry=false wins over a requested delay.
    assert retry_or_dead(locked(1), wants_retry=False, retry_after_seconds=30) == (Status.DEAD, 0)


@pytest.mark.parametrize(("attempts", "max_retries"), [(1, 0), (4, 3)])
def test_a_released_task_is_retried_even_on_its_last_attempt(attempts, max_retries):
    # Its claim's attempt is given back: it was never started, so it was no attempt.
    assert failed_attempt_outcome(locked(attempts, max_retries=max_retries), release=True) == (Status.RETRY, 0)
    assert failed_attempt_outcome(locked(attempts), release=True, retry_after_seconds=5) == (Status.RETRY, 5000)


def test_a_cancel_request_wins_over_a_release():
    row = {**locked(1, max_retries=0), "cancel_requested": True}
    assert failed_attempt_outcome(row, release=True) == (Status.CANCELLED, 0)


@pytest.mark.parametrize("seconds", [0, 1, 90, 86_400])
def test_a_requested_delay_is_exact_and_not_capped_by_the_queue(seconds):
    assert retry_or_dead(locked(1, cap=1000), retry_after_seconds=seconds) == (Status.RETRY, seconds * 1000)


def test_a_requested_delay_does_not_buy_attempts_beyond_the_limit():
    assert retry_or_dead(locked(4, max_retries=3), retry_after_seconds=5) == (Status.DEAD, 0)


def test_the_backoff_delay_is_capped_by_the_queue():
    assert retry_or_dead(locked(3, max_retries=20, base=1000, cap=2500)) == (Status.RETRY, 2500)


def done_row(worker: str = "w1", token: str = "lease-1", status: str = Status.DONE) -> dict[str, Any]:
    return {"status": status, "claimed_by": worker, "lease_token": token}


def test_an_ack_repeated_by_the_worker_that_holds_the_done_lease_is_a_repeat():
    assert is_repeated_ack(done_row(), worker_id="w1", lease_token="lease-1")
    assert is_repeated_ack(done_row(), worker_id="w1", lease_token=None)  # an ack naming no lease


@pytest.mark.parametrize(
    ("row", "worker_id", "lease_token"),
    [
        (done_row(status=Status.RETRY), "w1", "lease-1"),  # not done: the lease really was lost
        (done_row(status=Status.EXECUTING), "w1", None),
        (done_row(), "w2", "lease-1"),  # another worker
        (done_row(), "w1", "lease-2"),  # an older lease of the same worker
    ],
)
def test_anything_else_is_not_a_repeat(row, worker_id, lease_token):
    assert not is_repeated_ack(row, worker_id=worker_id, lease_token=lease_token)


def test_an_expired_lease_names_the_timeout_and_the_silent_worker():
    message = lease_expired_error(30.0, "worker-7")
    assert "30.0s" in message
    assert "worker-7" in message
    assert message.startswith("lease expired")
