"""``TaskForge``: the application object that task functions are registered with.

::

    app = TaskForge("http://taskforge:8080", "tf_...producer key")

    @app.task(queue="emails", kind="emails.send_welcome", max_retries=5, timeout=60, priority=3)
    def send_welcome(user_id: str) -> dict:
        ...

    handle = send_welcome.enqueue("abc123")
    handle.result(timeout=30)

The URL and key default to ``TASKFORGE_API_URL`` and ``TASKFORGE_API_KEY``;
nothing connects until the first enqueue, so a worker that imports the module
only to learn its tasks never opens a producer connection. Every enqueue
carries an idempotency key (a random one unless given), so the client may
send it again after a lost answer without creating the task twice.

Where tasks go is the app's ``store``: the HTTP API, or, in tests, the
in-process store of ``taskforge_client.testing``.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

from taskforge_client.bodies import Json
from taskforge_client.client import DEFAULT_TIMEOUT, TaskForgeClient
from taskforge_client.handles import HttpStore, TaskHandle, TaskStore
from taskforge_client.tasks import TaskFunction, TaskOptions, kind_of

__all__ = ["DEFAULT_QUEUE", "TaskForge"]

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_QUEUE = "default"
DEFAULT_URL = "http://localhost:8080"


class TaskForge:
    """Task functions by kind, and the connection that enqueues them. Thread-safe."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        default_queue: str = DEFAULT_QUEUE,
        client: TaskForgeClient | None = None,
    ) -> None:
        self.url = url or os.environ.get("TASKFORGE_API_URL") or DEFAULT_URL
        self.api_key = api_key or os.environ.get("TASKFORGE_API_KEY", "")
        self.timeout = timeout
        self.default_queue = default_queue
        self.tasks: dict[str, TaskFunction[Any, Any]] = {}
        self._client = client
        self._local: TaskStore | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<TaskForge {self.url} with {len(self.tasks)} tasks>"

    # -- registering

    @overload
    def task(self, function: Callable[P, R], /) -> TaskFunction[P, R]: ...

    @overload
    def task(
        self,
        *,
        queue: str | None = None,
        kind: str | None = None,
        priority: int | None = None,
        max_retries: int | None = None,
        timeout: int | None = None,
    ) -> Callable[[Callable[P, R]], TaskFunction[P, R]]: ...

    def task(
        self,
        function: Callable[..., Any] | None = None,
        *,
        queue: str | None = None,
        kind: str | None = None,
        priority: int | None = None,
        max_retries: int | None = None,
        timeout: int | None = None,
    ) -> Any:
        """Register a task function (``@app.task`` or ``@app.task(queue=..., ...)``).

        ``kind`` defaults to ``module.qualname``; ``priority`` 1 (first) to 10,
        ``max_retries`` 0-25 and ``timeout`` (seconds of one attempt, 1-86400)
        default to the queue's settings.
        """

        def register(func: Callable[..., Any]) -> TaskFunction[..., Any]:
            options = TaskOptions(
                queue=queue or self.default_queue,
                kind=kind or kind_of(func),
                priority=priority,
                max_retries=max_retries,
                timeout=timeout,
            )
            registered: TaskFunction[..., Any] = TaskFunction(self, func, options)
            with self._lock:
                known = self.tasks.get(options.kind)
                if known is not None and known.func is not func and kind_of(known.func) != kind_of(func):
                    raise ValueError(f"two task functions have the kind {options.kind!r}: {known.func} and {func}")
                self.tasks[options.kind] = registered
            return registered

        return register if function is None else register(function)

    def queues(self) -> list[str]:
        """The queues the registered tasks use, the one of the most urgent task (lowest priority) first."""
        best: dict[str, int] = {}
        for function in self.tasks.values():
            rank = function.task_options.priority or 5
            best[function.queue] = min(rank, best.get(function.queue, rank))
        return sorted(best, key=lambda name: best[name])  # stable: registration order among equals

    # -- sending and reading

    @property
    def client(self) -> TaskForgeClient:
        """The HTTP client, made on first use."""
        with self._lock:
            if self._client is None:
                if not self.api_key:
                    raise ValueError("TaskForge(url, api_key): no API key given and TASKFORGE_API_KEY is not set")
                self._client = TaskForgeClient(self.url, self.api_key, timeout=self.timeout)
            return self._client

    @property
    def store(self) -> TaskStore:
        """Where enqueues go: the in-process store while one is installed, else the API."""
        local = self._local
        return local if local is not None else HttpStore(self.client)

    def use_store(self, store: TaskStore | None) -> TaskStore | None:
        """Send enqueues to ``store`` (None: the API again); returns the one it replaces."""
        with self._lock:
            previous, self._local = self._local, store
            return previous

    def submit(self, queue: str, payload: Json, **fields: Any) -> TaskHandle:
        """Enqueue one task (a task function's ``enqueue`` comes here); returns its handle."""
        if fields.get("idempotency_key") is None:
            # A key of its own lets the client send it again after a lost answer, without a duplicate.
            fields["idempotency_key"] = f"tf-{uuid.uuid4()}"
        store = self.store
        return TaskHandle(store, store.submit(queue, payload, **fields))

    def handle(self, task_id: str) -> TaskHandle:
        """A handle on a task enqueued earlier (by id, say one saved in a database)."""
        store = self.store
        return TaskHandle(store, store.read(str(task_id), 0))

    def run_all(self) -> int:
        """Run every task waiting in the in-process store (``taskforge_client.testing``); how many ran."""
        local = self._local
        run = getattr(local, "run_all", None)
        if run is None:
            raise RuntimeError("run_all() needs the in-process mode of taskforge_client.testing")
        count: int = run()
        return count

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
