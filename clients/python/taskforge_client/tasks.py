"""Task functions: a plain function decorated with ``@app.task(...)``, enqueued by kind.

``send_welcome.enqueue(user_id)`` posts a task whose ``kind`` names the
function and whose payload carries the call (``{"args": [...], "kwargs":
{...}}``, see ``taskforge_client.payloads``); a worker that imported the
same module runs it (``python -m taskforge_client.worker myapp.tasks``).
The arguments are checked at enqueue, against the function's signature and
for JSON, so a bad call fails in the caller, never in the worker. Calling
``send_welcome(user_id)`` itself still just runs the function.

``async def`` functions run on one event loop thread beside the worker's
pool (``AsyncRunner``); a pool thread waits for each and cancels it when the
job is told to stop (time limit, cancel request, lost lease, shutdown).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import re
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from taskforge_client.handles import RETURN_VALUE_KEY, TaskHandle
from taskforge_client.outcomes import Fail
from taskforge_client.payloads import arguments_of, task_payload
from taskforge_client.worker.job import Job

__all__ = ["KIND_PATTERN", "Submitter", "TaskCall", "TaskFunction", "TaskOptions", "kind_of"]

P = ParamSpec("P")
R = TypeVar("R")


class Submitter(Protocol):
    """What a task function enqueues through: the ``TaskForge`` app (named here so tasks need not import it)."""

    def submit(self, queue: str, payload: Any, **fields: Any) -> TaskHandle: ...


# The contract's spelling of a kind: 1-128 letters, digits, ".", "_", "-", ":".
KIND_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# How often a pool thread waiting for a coroutine looks at the job's cancel flag.
ASYNC_POLL_SECONDS = 0.1


def kind_of(function: Callable[..., Any]) -> str:
    """The default kind of a function: ``module.qualname`` (``myapp.tasks.send_welcome``)."""
    return f"{function.__module__}.{function.__qualname__}"


@dataclass(frozen=True)
class TaskOptions:
    """The enqueue fields of a task: its decorator's options, overridden per call by ``.options()``."""

    queue: str
    kind: str
    priority: int | None = None
    max_retries: int | None = None
    timeout: int | None = None
    idempotency_key: str | None = None

    def __post_init__(self) -> None:
        if not KIND_PATTERN.fullmatch(self.kind):
            raise ValueError(
                f"task kind {self.kind!r} must be 1-128 letters, digits, '.', '_', '-' or ':' "
                "(give kind=... to @app.task for a function defined inside another)"
            )
        _check_range("priority", self.priority, 1, 10)
        _check_range("max_retries", self.max_retries, 0, 25)
        _check_range("timeout", self.timeout, 1, 86400)
        if not self.queue:
            raise ValueError("a task needs a queue")
        if self.idempotency_key is not None and not 1 <= len(self.idempotency_key) <= 255:
            raise ValueError("idempotency_key must be 1-255 characters")

    def fields(self) -> dict[str, Any]:
        """Keyword arguments of ``TaskForgeClient.enqueue`` (the contract's enqueue body)."""
        return {
            "kind": self.kind,
            "priority": self.priority,
            "max_retries": self.max_retries,
            "timeout_seconds": self.timeout,
            "idempotency_key": self.idempotency_key,
        }


def _check_range(name: str, value: object, low: int, high: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high):
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}")


class TaskCall(Generic[P, R]):  # noqa: UP046 - the client supports Python 3.11
    """A task function with options chosen for the enqueues made through it (``fn.options(...)``)."""

    def __init__(self, function: TaskFunction[P, R], options: TaskOptions) -> None:
        self.function = function
        self.task_options = options

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        """Enqueue a call of the function; returns its ``TaskHandle``."""
        return self._send(None, args, kwargs)

    def enqueue_at(self, when: datetime, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        """Enqueue a call due at ``when`` (a timezone-aware datetime)."""
        if when.utcoffset() is None:
            raise ValueError("enqueue_at needs a timezone-aware datetime (naive ones are ambiguous)")
        return self._send(when, args, kwargs)

    def enqueue_in(self, seconds: float | timedelta, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        """Enqueue a call due ``seconds`` from now."""
        delay = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        return self._send(datetime.now(UTC) + delay, args, kwargs)

    def _send(self, when: datetime | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TaskHandle:
        function = self.function
        function.check_call(args, kwargs)
        payload = task_payload(function.func.__name__, args, kwargs)
        options = self.task_options
        return function.app.submit(options.queue, payload, scheduled_at=when, **options.fields())


class TaskFunction(TaskCall[P, R]):
    """A function registered with ``@app.task``: call it to run it here, ``enqueue`` it to run it on a worker."""

    def __init__(self, app: Submitter, function: Callable[P, R], options: TaskOptions) -> None:
        super().__init__(self, options)
        self.app = app
        self.func = function
        self.kind = options.kind
        self.queue = options.queue
        self.is_async = inspect.iscoroutinefunction(function)
        functools.update_wrapper(self, function)
        self._signature = inspect.signature(function)

    def __repr__(self) -> str:
        return f"<task {self.kind} on queue {self.queue!r}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def options(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        max_retries: int | None = None,
        timeout: int | None = None,
        idempotency_key: str | None = None,
    ) -> TaskCall[P, R]:
        """The same task with some options changed for the enqueues made through the result."""
        current = self.task_options
        options = replace(
            current,
            queue=current.queue if queue is None else queue,
            priority=current.priority if priority is None else priority,
            max_retries=current.max_retries if max_retries is None else max_retries,
            timeout=current.timeout if timeout is None else timeout,
            idempotency_key=current.idempotency_key if idempotency_key is None else idempotency_key,
        )
        return TaskCall(self, options)

    def check_call(self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> None:
        """``TypeError`` when the function cannot be called with these arguments."""
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.kind}: {exc}") from None

    def run_job(self, job: Job) -> dict[str, Any] | None:
        """Run the call a claimed task carries (the worker's side); the result to ack.

        A function that returns ``None`` is acked without a result (``result()`` reads back
        ``None`` all the same): most tasks return nothing, and an ack without a result
        writes less on every task."""
        try:
            args, kwargs = arguments_of(job.payload)
            self.check_call(args, kwargs)
        except (TypeError, ValueError) as exc:
            raise Fail(f"cannot run {self.kind}: {exc}") from None  # the same payload would fail every time
        value: Any = self.func(*args, **kwargs)
        if self.is_async:  # the call made a coroutine: run it on the event loop thread
            value = ASYNC.run(value, job)
        return None if value is None else {RETURN_VALUE_KEY: value}


class AsyncRunner:
    """One event loop thread, started on first use, that runs every ``async def`` task of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="taskforge-asyncio", daemon=True).start()
                self._loop = loop
            return self._loop

    def run(self, coroutine: Coroutine[Any, Any, Any], job: Job) -> Any:
        """Run ``coroutine`` on the loop and wait for it; cancel it once the job is told to stop."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop())
        while True:
            try:
                return future.result(timeout=ASYNC_POLL_SECONDS)
            except concurrent.futures.TimeoutError:
                if future.done():
                    raise  # the coroutine's own TimeoutError, not the wait's
                if job.cancelled.is_set():
                    future.cancel()


ASYNC = AsyncRunner()
