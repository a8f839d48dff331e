"""What ``enqueue`` gives back: a ``TaskHandle`` to wait for the task's result or cancel it.

``handle.result(timeout=30)`` waits with the server's long poll
(``GET /tasks/{id}?wait_seconds=N``, N at most 30, in a loop until the
timeout), so a result arrives as soon as the task finishes without polling.
It returns what the task function returned (the ``return_value`` of the
task's ``result``), or raises ``TaskFailed`` (dead: every attempt failed,
or it raised ``Fail``), ``TaskCancelled`` or ``ResultTimeout`` (a
``TimeoutError``: still not finished when the timeout passed).

A handle reads through a ``TaskStore``: the HTTP API (``HttpStore``), or the
in-process store of ``taskforge_client.testing``, so tests wait and cancel
exactly as production code does.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol

from taskforge_client.bodies import Json
from taskforge_client.client import TaskForgeClient

__all__ = [
    "MAX_WAIT_SECONDS",
    "RETURN_VALUE_KEY",
    "HttpStore",
    "ResultTimeout",
    "TaskCancelled",
    "TaskFailed",
    "TaskHandle",
    "TaskStore",
    "return_value",
]

# The longest wait one read may ask the server for (the contract's cap).
MAX_WAIT_SECONDS = 30
# A task function's return value travels in the task's result under this key (as Django tasks' do).
RETURN_VALUE_KEY = "return_value"
SETTLED = frozenset({"done", "dead", "cancelled"})


class TaskFailed(Exception):
    """The task is ``dead``: its attempts are used up or it raised ``Fail``. ``last_error`` says why."""

    def __init__(self, task: Json) -> None:
        self.task = task
        self.id = str(task.get("id"))
        self.last_error: str | None = task.get("last_error")
        headline = self.last_error.splitlines()[0] if self.last_error else "no error recorded"
        super().__init__(f"task {self.id} ({task.get('kind') or 'no kind'}) failed: {headline}")


class TaskCancelled(Exception):
    """The task was cancelled before it finished."""

    def __init__(self, task: Json) -> None:
        self.task = task
        self.id = str(task.get("id"))
        super().__init__(f"task {self.id} ({task.get('kind') or 'no kind'}) was cancelled")


class ResultTimeout(TimeoutError):
    """The task had not finished when ``result(timeout)`` gave up; it may still finish later."""

    def __init__(self, task: Json, timeout: float, hint: str = "") -> None:
        self.task = task
        self.id = str(task.get("id"))
        super().__init__(f"task {self.id} is still {task.get('status')} after {timeout:g} s{hint}")


class TaskStore(Protocol):
    """Where tasks are sent and read back: the HTTP API, or the in-process store of the tests."""

    def submit(self, queue: str, payload: Json, **fields: Any) -> Json: ...

    def read(self, task_id: str, wait_seconds: int) -> Json: ...

    def cancel(self, queue: str, task_id: str) -> Json: ...


class HttpStore:
    """The TaskForge API through a ``TaskForgeClient``."""

    def __init__(self, client: TaskForgeClient) -> None:
        self.client = client

    def submit(self, queue: str, payload: Json, **fields: Any) -> Json:
        return self.client.enqueue(queue, payload, **fields)

    def read(self, task_id: str, wait_seconds: int) -> Json:
        return self.client.find_task(task_id, wait_seconds=wait_seconds)

    def cancel(self, queue: str, task_id: str) -> Json:
        return self.client.cancel(queue, task_id)


def return_value(result: Any) -> Any:
    """What the task function returned: ``result["return_value"]``, or the whole result of a task
    some other handler acked."""
    if isinstance(result, dict) and RETURN_VALUE_KEY in result:
        return result[RETURN_VALUE_KEY]
    return result


class TaskHandle:
    """One enqueued task: ``id``, ``queue``, ``kind``, ``task`` (as last read), ``result()``, ``cancel()``."""

    def __init__(self, store: TaskStore, task: Json) -> None:
        self._store = store
        self.task = task
        self.id = str(task["id"])
        self.queue = str(task.get("queue", ""))
        self.kind: str | None = task.get("kind")

    def __repr__(self) -> str:
        return f"<TaskHandle {self.kind or 'task'} {self.id} {self.status}>"

    @property
    def status(self) -> str:
        """The status as last read (``refresh()`` reads it again)."""
        return str(self.task.get("status"))

    def refresh(self) -> Json:
        """Read the task again (with its ``history`` and ``progress``)."""
        self.task = self._store.read(self.id, 0)
        return self.task

    def result(self, timeout: float = 30.0) -> Any:
        """Wait up to ``timeout`` seconds for the task to finish; its function's return value.

        Raises ``TaskFailed`` (dead), ``TaskCancelled`` or ``ResultTimeout``.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        task = self.task
        while task.get("status") not in SETTLED:
            left = deadline - time.monotonic()
            # Whole seconds, as the contract takes them; a last fraction is slept, then read once more.
            wait = min(MAX_WAIT_SECONDS, math.floor(max(left, 0)))
            if wait == 0 and left > 0:
                time.sleep(left)
            task = self._store.read(self.id, wait)
            self.task = task
            if wait == 0:
                break
        return self._settled(task, timeout)

    def _settled(self, task: Json, timeout: float) -> Any:
        status = task.get("status")
        if status == "done":
            return return_value(task.get("result"))
        if status == "dead":
            raise TaskFailed(task)
        if status == "cancelled":
            raise TaskCancelled(task)
        raise ResultTimeout(task, timeout)

    def cancel(self) -> Json:
        """Cancel the task: at once if it waits; a running one is asked to stop (``cancel_requested``)."""
        self.task = {**self.task, **self._store.cancel(self.queue, self.id)}
        return self.task
