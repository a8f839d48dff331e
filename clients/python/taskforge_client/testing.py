"""Run task functions in process, for tests: no server, no worker, the same outcomes.

::

    from taskforge_client.testing import run_in_process

    def test_welcome_mail_is_sent():
        with run_in_process(app):                  # eager: enqueue() runs the task at once
            handle = send_welcome.enqueue("abc123")
            assert handle.result() == {"sent": True}

    def test_later():
        with run_in_process(app, eager=False):     # enqueue() only stores the task...
            handle = send_welcome.enqueue("abc123")
            assert app.run_all() == 1              # ...until run_all() runs every waiting task
            assert handle.status == "done"

Tasks run in the calling thread through the worker's own code (kind lookup,
``Retry``/``Fail`` and exceptions turned into outcomes, results checked as
JSON): a failed attempt is retried at once while ``1 + max_retries``
attempts last (the queue's delays and ``scheduled_at`` are not waited for),
then the task is ``dead`` and ``handle.result()`` raises ``TaskFailed``. A
task whose ``max_retries`` was not given gets ``DEFAULT_MAX_RETRIES`` (the
contract's queue default). Arguments are checked at enqueue exactly as
against a server.

As a pytest plugin (``pytest_plugins = ["taskforge_client.testing"]``), it
offers the fixtures ``taskforge_eager`` and ``taskforge_deferred``: each puts
the app your ``taskforge_app`` fixture returns in process mode for the test
and yields the ``LocalTasks`` store (``.tasks`` holds every task).
"""

from __future__ import annotations

import copy
import functools
import itertools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from taskforge_client.app import TaskForge
from taskforge_client.bodies import Json
from taskforge_client.errors import Conflict, NotFound
from taskforge_client.handles import ResultTimeout
from taskforge_client.worker.flights import Flight
from taskforge_client.worker.handlers import Handlers
from taskforge_client.worker.job import Job
from taskforge_client.worker.outcome import outcome_of

__all__ = ["DEFAULT_MAX_RETRIES", "LocalTasks", "run_in_process", "taskforge_deferred", "taskforge_eager"]

DEFAULT_MAX_RETRIES = 3
WORKER_ID = "in-process"
WAITING = ("pending", "retry")


def _now() -> str:
    return datetime.now(UTC).isoformat()


class LocalTasks:
    """An in-process task store: ``submit`` keeps (and, eager, runs) a task; ``run_all`` runs the waiting ones."""

    def __init__(self, app: TaskForge, *, eager: bool = True) -> None:
        self.app = app
        self.eager = eager
        self.tasks: dict[str, Json] = {}
        self._keys: dict[tuple[str, str], str] = {}
        self._order = itertools.count()
        self._handlers = Handlers(None, app.tasks)

    # -- the TaskStore side

    def submit(self, queue: str, payload: Json, **fields: Any) -> Json:
        key = fields.get("idempotency_key")
        if key is not None and (queue, key) in self._keys:
            return copy.deepcopy(self.tasks[self._keys[queue, key]])  # the contract's idempotent replay
        when = fields.get("scheduled_at")
        task: Json = {
            "id": str(uuid.uuid4()),
            "queue": queue,
            "payload": copy.deepcopy(payload),
            "kind": fields.get("kind"),
            "status": "pending",
            "priority": fields.get("priority") or 5,
            "scheduled_at": when.isoformat() if isinstance(when, datetime) else (when or _now()),
            "created_at": _now(),
            "attempts": 0,
            "max_retries": DEFAULT_MAX_RETRIES if fields.get("max_retries") is None else fields["max_retries"],
            "timeout_seconds": fields.get("timeout_seconds"),
            "idempotency_key": key,
            "last_error": None,
            "result": None,
            "progress": None,
            "cancel_requested": False,
            "finished_at": None,
            "history": [],
            "_order": next(self._order),
        }
        self.tasks[task["id"]] = task
        if key is not None:
            self._keys[queue, key] = task["id"]
        if self.eager:
            self._run(task)
        return self._public(task)

    def read(self, task_id: str, wait_seconds: int) -> Json:
        task = self.tasks.get(str(task_id))
        if task is None:
            raise NotFound(f"no task {task_id}", status=404)
        if wait_seconds and task["status"] in WAITING:
            # Nothing runs it while the caller waits (one thread): say so now instead of after the timeout.
            raise ResultTimeout(self._public(task), 0, hint=": in process, waiting tasks run on app.run_all()")
        return self._public(task)

    def cancel(self, queue: str, task_id: str) -> Json:
        task = self.tasks.get(str(task_id))
        if task is None or task["queue"] != queue:
            raise NotFound(f"no task {task_id} in queue {queue!r}", status=404)
        if task["status"] in WAITING:
            self._move(task, "cancelled", None)
        elif task["status"] in ("claimed", "executing"):
            task["cancel_requested"] = True  # a task cancelling itself, or a task it enqueued
        else:
            raise Conflict(f"task {task_id} is {task['status']}: it cannot be cancelled", status=409)
        return self._public(task)

    # -- running

    def run_all(self) -> int:
        """Run the waiting tasks, most urgent first, until none is left (tasks they enqueue too); attempts run."""
        ran = 0
        while True:
            waiting = [task for task in self.tasks.values() if task["status"] in WAITING]
            if not waiting:
                return ran
            ran += self._run(min(waiting, key=lambda task: (task["priority"], task["_order"])))

    def _run(self, task: Json) -> int:
        """Run ``task``'s attempts until it is done, dead or cancelled; how many attempts ran."""
        attempts = 0
        while task["status"] in WAITING:
            attempts += 1
            task["attempts"] += 1
            self._move(task, "executing", None)
            job = Job.from_claim(self._public(task), worker_id=WORKER_ID, default_queue=task["queue"])
            outcome = outcome_of(Flight.start(job, 10.0), functools.partial(self._handlers, job))
            if job.cancel_requested or task["cancel_requested"]:
                self._finish(task, "cancelled", "cancelled on request")
            elif outcome.ack:
                task["result"] = outcome.result
                self._finish(task, "done", None)
            elif not outcome.retry or task["attempts"] >= 1 + task["max_retries"]:
                self._finish(task, "dead", outcome.error)
            else:
                task["last_error"] = outcome.error
                self._move(task, "retry", outcome.error)
        return attempts

    def _finish(self, task: Json, status: str, error: str | None) -> None:
        if error is not None:
            task["last_error"] = error
        task["finished_at"] = _now()
        self._move(task, status, error)

    def _move(self, task: Json, status: str, detail: str | None) -> None:
        task["history"].append(
            {"at": _now(), "from_status": task["status"], "to_status": status, "worker_id": WORKER_ID, "detail": detail}
        )
        task["status"] = status

    @staticmethod
    def _public(task: Json) -> Json:
        return {name: copy.deepcopy(value) for name, value in task.items() if not name.startswith("_")}


@contextmanager
def run_in_process(app: TaskForge, *, eager: bool = True) -> Iterator[LocalTasks]:
    """Within the block, the app's enqueues go to a ``LocalTasks`` store instead of the server."""
    local = LocalTasks(app, eager=eager)
    previous = app.use_store(local)
    try:
        yield local
    finally:
        app.use_store(previous)


try:  # the fixtures, when pytest is there (the package itself never needs it)
    import pytest
except ImportError:  # pragma: no cover - pytest is optional
    pass
else:

    @pytest.fixture
    def taskforge_eager(request: pytest.FixtureRequest) -> Iterator[LocalTasks]:
        """Tasks of the ``taskforge_app`` fixture's app run as they are enqueued."""
        with run_in_process(request.getfixturevalue("taskforge_app"), eager=True) as local:
            yield local

    @pytest.fixture
    def taskforge_deferred(request: pytest.FixtureRequest) -> Iterator[LocalTasks]:
        """Tasks of the ``taskforge_app`` fixture's app wait for ``app.run_all()``."""
        with run_in_process(request.getfixturevalue("taskforge_app"), eager=False) as local:
            yield local
