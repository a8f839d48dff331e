"""The worker's side of ``@app.task``: app modules, claim queues, kinds, progress and cancel requests.

Heartbeats go through ``httpx.MockTransport`` so the answer (``cancel_requested``,
a failure) is the test's choice. Against a live API and worker processes:
tests/integration/workers/test_app_tasks.py.
"""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from taskforge_client import Fail, TaskForgeClient
from taskforge_client.worker.apps import load_app
from taskforge_client.worker.config import ConfigError, load_config
from taskforge_client.worker.flights import Flight, InFlight
from taskforge_client.worker.handlers import Handlers
from taskforge_client.worker.heartbeats import Heartbeats
from taskforge_client.worker.job import Job
from taskforge_client.worker.queues import ClaimQueues

KEY = {"TASKFORGE_API_KEY": "tf_worker_key"}


def job(kind: str | None = "emails.send_welcome", payload: dict | None = None) -> Job:
    task = {"id": "t-1", "queue": "emails", "attempts": 1, "kind": kind, "lease_token": "l"}
    return Job.from_claim(
        {**task, "payload": payload or {"args": ["a"], "kwargs": {}}}, worker_id="w", default_queue=None
    )


def test_the_app_module_is_positional_or_a_flag_and_excludes_a_handler():
    assert load_config(["myapp.tasks"], KEY).app == "myapp.tasks"
    assert load_config(["--app", "myapp.tasks"], KEY).app == "myapp.tasks"
    assert load_config([], {**KEY, "TASKFORGE_APP": "myapp.tasks"}).app == "myapp.tasks"
    with pytest.raises(ConfigError, match="not both"):
        load_config(["myapp.tasks", "--handler", "m:f"], KEY)
    with pytest.raises(ConfigError, match="two apps given"):
        load_config(["a.tasks", "--app", "b.tasks"], KEY)


def test_loading_an_app_module_finds_its_tasks_and_queues_most_urgent_first():
    loaded = load_app("tests.unit.client.tasks_app")
    assert {"emails.send_welcome", "tests.unit.client.tasks_app.flaky"} <= set(loaded.tasks)
    assert loaded.queues == ["reports", "emails", "default"]  # refuse has priority 1, send_welcome 3
    assert load_app("tests.unit.client.tasks_app:app").tasks == loaded.tasks
    with pytest.raises(ConfigError, match="no TaskForge app named 'nope'"):
        load_app("tests.unit.client.tasks_app:nope")
    with pytest.raises(ConfigError, match=r"no @app\.task functions found"):
        load_app("json")
    with pytest.raises(ConfigError, match="cannot import"):
        load_app("no_such_module_here")


def test_one_queue_always_long_polls():
    queues = ClaimQueues(["emails"], 5)
    for got in (False, True, False):
        assert queues.next() == ("emails", 5)
        queues.claimed(got)
    assert ClaimQueues([None], 5).next() == (None, 5)


def test_several_queues_are_swept_without_waiting_then_long_polled_in_turn():
    queues = ClaimQueues(["urgent", "bulk", "rare"], 6)
    seen = []
    for _ in range(5):
        seen.append(queues.next())
        queues.claimed(False)
    assert seen == [("urgent", 0), ("bulk", 0), ("rare", 0), ("urgent", 2), ("bulk", 2)]
    queues.claimed(True)  # tasks came: the most urgent queue is asked first again, without waiting
    assert queues.next() == ("urgent", 0)


def test_each_kind_runs_its_function_and_an_unknown_kind_fails_for_good():
    from tests.unit.client.tasks_app import app

    handlers = Handlers(None, app.tasks)
    assert handlers(job()) == {"return_value": {"user_id": "a", "template": "welcome"}}
    with pytest.raises(Fail, match=r"unknown task kind 'emails\.gone': this worker runs .*emails\.send_welcome"):
        handlers(job("emails.gone"))
    with pytest.raises(Fail, match="task has no kind"):
        handlers(job(None))
    with pytest.raises(Fail, match=r"cannot run emails\.send_welcome: .*missing a required argument"):
        handlers(job(payload={"args": [], "kwargs": {}}))
    with pytest.raises(Fail, match=r"payload is not \{\"args\""):
        handlers(job(payload={"user": "a"}))


def test_progress_must_be_a_small_json_object():
    running = job()
    with pytest.raises(TypeError, match="dict"):
        running.progress([1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most 4096"):
        running.progress({"blob": "x" * 5000})
    running.progress({"done": 1})
    running.progress({"done": 2})  # the newer report replaces one not yet sent
    assert running.take_progress() == {"done": 2}
    assert running.take_progress() is None


class Beats:
    def __init__(self, status: int = 200, body: dict | None = None) -> None:
        self.bodies: list[dict] = []
        self.status, self.body = status, body or {"task_id": "t-1", "status": "executing"}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return httpx.Response(self.status, json=self.body)


def beat_once(beats: Beats, running: Job) -> None:
    client = TaskForgeClient("http://tf.test", "k", transport=httpx.MockTransport(beats), retries=0)
    log = lambda *args, **kwargs: None  # noqa: E731
    flights = InFlight(1)
    flight = Flight.start(running, 10.0)
    flights.add(flight)
    Heartbeats(client, flights, log, tick=0.1).beat(flight)  # type: ignore[arg-type]


def test_a_heartbeat_carries_the_waiting_progress_and_a_failed_one_keeps_it(caplog):
    caplog.set_level(logging.ERROR)
    running = job()
    running.progress({"step": 3})
    failing = Beats(status=500, body={"error": {"code": "server_error", "message": "boom"}})
    beat_once(failing, running)
    assert failing.bodies[0]["progress"] == {"step": 3}
    working = Beats()
    beat_once(working, running)
    beat_once(working, running)
    assert working.bodies[0]["progress"] == {"step": 3}
    assert "progress" not in working.bodies[1]  # sent once: a heartbeat without progress keeps the last


def test_a_heartbeat_answer_with_cancel_requested_tells_the_handler_to_stop():
    running = job()
    beat_once(Beats(body={"task_id": "t-1", "status": "executing"}), running)
    assert not running.cancelled and not running.cancel_requested
    beat_once(Beats(body={"task_id": "t-1", "status": "executing", "cancel_requested": True}), running)
    assert running.cancelled and running.cancel_requested and running.cancelled.wait(0)
