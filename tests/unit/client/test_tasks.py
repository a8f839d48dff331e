"""``@app.task`` functions: enqueue fields, argument checks, handles, and the in-process mode.

The in-process store (``taskforge_client.testing``) runs tasks through the
worker's own handler and outcome code, so these tests also pin the worker's
semantics by kind: unknown kinds, ``Retry``/``Fail``, retries up to
``1 + max_retries`` attempts. Against a live API and worker:
tests/integration/workers/test_app_tasks.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from taskforge_client import (
    NotSerializable,
    ResultTimeout,
    TaskCancelled,
    TaskFailed,
    TaskForge,
    TaskForgeClient,
)
from taskforge_client.testing import LocalTasks, run_in_process
from tests.unit.client import tasks_app
from tests.unit.client.tasks_app import (
    add_async,
    again_later,
    app,
    falsy,
    fan_out,
    flaky,
    quiet,
    refuse,
    send_welcome,
)


@pytest.fixture
def taskforge_app() -> TaskForge:
    return app


@pytest.fixture(autouse=True)
def _clear_calls():
    tasks_app.calls.clear()


class Recorder:
    """An in-memory transport: records requests, answers each with the next of ``answers``."""

    def __init__(self, *answers: dict) -> None:
        self.requests: list[httpx.Request] = []
        self.answers = list(answers)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, json=self.answers.pop(0) if len(self.answers) > 1 else self.answers[0])


def http_app(recorder: Recorder) -> TaskForge:
    return TaskForge(client=TaskForgeClient("http://tf.test", "k", transport=httpx.MockTransport(recorder), retries=0))


@pytest.fixture
def recorder():
    """The test app's functions, sending their enqueues over (in-memory) HTTP for the test."""
    recorder = Recorder({"id": "t-1", "queue": "emails", "kind": "emails.send_welcome", "status": "pending"})
    remote = http_app(recorder)
    for function in app.tasks.values():
        function.app = remote
    yield recorder
    for function in app.tasks.values():
        function.app = app


def test_decorator_options_become_the_enqueue_body(recorder):
    handle = send_welcome.enqueue("abc123", template="short")
    (request,) = recorder.requests
    assert request.url.path == "/queues/emails/tasks"
    body = json.loads(request.content)
    assert body["payload"] == {"args": ["abc123"], "kwargs": {"template": "short"}}
    assert body["kind"] == "emails.send_welcome"
    assert (body["priority"], body["max_retries"], body["timeout_seconds"]) == (3, 5, 60)
    assert body["idempotency_key"].startswith("tf-")  # so a lost answer can be sent again safely
    assert (handle.id, handle.kind, handle.queue) == ("t-1", "emails.send_welcome", "emails")


def test_kind_defaults_to_module_and_qualname_and_options_override(recorder):
    flaky.options(idempotency_key="once", priority=9, queue="other").enqueue(1)
    body = json.loads(recorder.requests[0].content)
    assert recorder.requests[0].url.path == "/queues/other/tasks"
    assert body["kind"] == "tests.unit.client.tasks_app.flaky"
    assert (body["idempotency_key"], body["priority"], body["max_retries"]) == ("once", 9, 2)
    assert "timeout_seconds" not in body  # the queue's own limit applies


def test_enqueue_at_and_in_send_scheduled_at(recorder):
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    send_welcome.enqueue_at(when, "a")
    before = datetime.now(UTC)
    send_welcome.enqueue_in(90, "b")
    first, second = (json.loads(r.content) for r in recorder.requests)
    assert datetime.fromisoformat(first["scheduled_at"]) == when
    assert abs(datetime.fromisoformat(second["scheduled_at"]) - before - timedelta(seconds=90)) < timedelta(seconds=5)
    with pytest.raises(ValueError, match="timezone-aware"):
        send_welcome.enqueue_at(datetime(2030, 1, 1), "c")


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((object(),), {}, r"args\[0\] is a builtins.object"),
        (("a",), {"template": float("nan")}, r"kwargs\['template'\] is nan"),
        (({1: "x"},), {}, r"args\[0\] has the key 1"),
        ((["ok", {"when": datetime.now(UTC)}],), {}, r"args\[0\]\[1\]\['when'\] is a datetime.datetime"),
        (("\ud800",), {}, "lone surrogate"),
    ],
)
def test_arguments_json_cannot_carry_are_refused_at_enqueue(recorder, args, kwargs, message):
    with pytest.raises(NotSerializable, match=message) as caught:
        send_welcome.enqueue(*args, **kwargs)
    assert isinstance(caught.value, TypeError)
    assert recorder.requests == []


def test_calls_the_function_cannot_take_are_refused_at_enqueue(recorder):
    with pytest.raises(TypeError, match="missing a required argument: 'user_id'"):
        send_welcome.enqueue()
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        send_welcome.enqueue("a", colour="red")
    assert recorder.requests == []


def test_bad_decorator_options_fail_at_import():
    with pytest.raises(ValueError, match="priority must be a whole number from 1 to 10"):
        app.task(kind="bad.priority", priority=0)(lambda: None)
    with pytest.raises(ValueError, match="kind"):  # a lambda's qualname holds "<lambda>"
        app.task(lambda: None)


def test_result_waits_with_the_long_poll_and_unwraps_the_return_value():
    recorder = Recorder(
        {"id": "t-1", "queue": "emails", "status": "pending"},
        {"id": "t-1", "status": "executing"},
        {"id": "t-1", "status": "done", "result": {"return_value": [1, 2]}},
    )
    handle = http_app(recorder).submit("emails", {"args": [], "kwargs": {}})
    assert handle.result(timeout=45) == [1, 2]
    waits = [r.url.params.get("wait_seconds") for r in recorder.requests[1:]]
    assert [r.url.path for r in recorder.requests[1:]] == ["/tasks/t-1", "/tasks/t-1"]
    assert all(1 <= int(w) <= 30 for w in waits), waits


def test_result_raises_for_dead_cancelled_and_unfinished():
    dead = {"id": "t", "queue": "q", "status": "dead", "last_error": "ValueError: bad\n\ntraceback"}
    with pytest.raises(TaskFailed, match="failed: ValueError: bad") as failed:
        http_app(Recorder(dead)).submit("q", {}).result(timeout=1)
    assert failed.value.last_error.startswith("ValueError: bad")
    with pytest.raises(TaskCancelled):
        http_app(Recorder({"id": "t", "queue": "q", "status": "cancelled"})).submit("q", {}).result(timeout=1)
    with pytest.raises(ResultTimeout) as late:
        http_app(Recorder({"id": "t", "queue": "q", "status": "pending"})).submit("q", {}).result(timeout=0)
    assert isinstance(late.value, TimeoutError)


# -- in process


def test_eager_mode_runs_the_task_at_enqueue(taskforge_eager: LocalTasks):
    handle = send_welcome.enqueue("abc123")
    assert handle.status == "done"
    assert handle.result() == {"user_id": "abc123", "template": "welcome"}
    assert tasks_app.calls == [("send_welcome", 1)]
    assert taskforge_eager.tasks[handle.id]["kind"] == "emails.send_welcome"


def test_a_function_returning_none_is_acked_without_a_result_and_reads_back_none(taskforge_eager):
    handle = quiet.enqueue(7)
    assert handle.result() is None and taskforge_eager.tasks[handle.id]["result"] is None
    assert tasks_app.calls == [("quiet", 7)]
    # Any other value, a falsy one included, is kept as the return value.
    zero = falsy.enqueue()
    assert zero.result() == 0 and taskforge_eager.tasks[zero.id]["result"] == {"return_value": 0}


def test_failed_attempts_are_retried_up_to_max_retries_then_dead(taskforge_eager):
    assert flaky.enqueue(2).result() == 3  # attempts 1 and 2 fail, max_retries=2 allows a third
    with pytest.raises(TaskFailed, match="ConnectionError: attempt 3 failed") as dead:
        flaky.enqueue(3).result()
    assert dead.value.task["attempts"] == 3


def test_fail_and_retry_follow_the_worker_rules(taskforge_eager):
    with pytest.raises(TaskFailed, match="no such user") as failed:
        refuse.enqueue("no such user").result()
    assert failed.value.task["attempts"] == 1  # Fail: dead at once
    retried = again_later.enqueue()
    assert retried.status == "dead" and retried.task["attempts"] == 4  # the contract's default max_retries 3


def test_deferred_mode_waits_for_run_all_in_priority_order(taskforge_deferred):
    welcome = send_welcome.enqueue("a")  # priority 3
    refused = refuse.enqueue("later")  # priority 1: runs first
    assert welcome.status == "pending"
    with pytest.raises(ResultTimeout):
        welcome.result(timeout=0)
    with pytest.raises(ResultTimeout, match=r"waiting tasks run on app\.run_all"):
        welcome.result(timeout=30)  # at once: nothing could run it meanwhile
    assert app.run_all() == 2
    assert welcome.result() == {"user_id": "a", "template": "welcome"}
    stored = taskforge_deferred.tasks
    assert stored[refused.id]["finished_at"] <= stored[welcome.id]["finished_at"]
    with pytest.raises(TaskFailed):
        refused.result()
    assert taskforge_deferred.tasks[refused.id]["history"][-1]["to_status"] == "dead"


def test_tasks_enqueued_by_tasks_and_async_tasks_run_too(taskforge_deferred):
    fan = fan_out.enqueue(2)
    total = add_async.enqueue(2, 3)
    assert app.run_all() == 4
    assert len(fan.result()) == 2 and total.result() == 5


def test_cancel_and_idempotent_replay_in_process(taskforge_deferred):
    first = send_welcome.options(idempotency_key="welcome-a").enqueue("a")
    assert send_welcome.options(idempotency_key="welcome-a").enqueue("a").id == first.id
    first.cancel()
    with pytest.raises(TaskCancelled):
        first.result()
    assert app.run_all() == 0


def test_unknown_kind_is_dead_at_once_with_a_clear_error():
    with run_in_process(app) as local:
        handle = app.submit("emails", {"args": [], "kwargs": {}}, kind="emails.gone")
    assert handle.status == "dead" and handle.task["attempts"] == 1
    assert "unknown task kind 'emails.gone': this worker runs" in handle.task["last_error"]
    assert local.tasks[handle.id]["last_error"] == handle.task["last_error"]


def test_outside_the_block_enqueues_go_to_the_server_again():
    with run_in_process(app):
        pass
    assert app._local is None
