"""What a handler's return becomes, and which function a payload runs: no network involved."""

from __future__ import annotations

import json
import math

import pytest

from taskforge_client import Retry
from taskforge_client.worker.flights import Flight
from taskforge_client.worker.handlers import Handlers
from taskforge_client.worker.job import Job
from taskforge_client.worker.outcome import outcome_of


def flight(payload: dict | None = None) -> Flight:
    return Flight.start(Job("t-1", "q", payload or {}, 1, 0, "w", "lease", {}), heartbeat_interval=10)


def encodes(body: dict) -> bool:
    """Whether ``body`` goes out as an HTTP client sends JSON: UTF-8 text, no NaN."""
    json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
    return True


@pytest.mark.parametrize("result", [{"s": "\ud800"}, {"nested": ["ok", {"s": "\udfff"}]}, {"x": math.nan}])
def test_a_result_that_cannot_be_sent_is_a_nack_saying_so(result):
    outcome = outcome_of(flight(), lambda: result)
    assert not outcome.ack
    assert outcome.retry is True  # a failed attempt like any other: retried with the queue's backoff
    assert outcome.error.startswith("result is not valid JSON: ")
    assert encodes(outcome.item())


def test_error_texts_with_lone_surrogates_are_still_sent():
    def boom() -> None:
        raise ValueError("bad byte \udcff in input")

    crashed = outcome_of(flight(), boom)
    assert crashed.error.startswith("ValueError: bad byte \\udcff in input")
    assert encodes(crashed.item())

    def later() -> None:
        raise Retry("try \ud800 again", after=1)

    retried = outcome_of(flight(), later)
    assert retried.error == "try \\ud800 again"
    assert encodes(retried.item())


def test_the_handler_given_on_the_command_line_wins_over_a_django_task_payload():
    """Whoever can enqueue must not choose which function a worker with --handler runs."""
    seen = []

    def handler(payload: dict, job: Job) -> dict:
        seen.append(payload)
        return {"ran": "handler"}

    handlers = Handlers(handler)
    payload = {"django_task": {"path": "os.system", "args": ["true"], "kwargs": {}}}
    assert handlers(flight(payload).job) == {"ran": "handler"}
    assert seen == [payload]


def test_without_a_handler_a_plain_payload_is_refused():
    with pytest.raises(LookupError, match="no --handler"):
        Handlers(None)(flight({"n": 1}).job)
