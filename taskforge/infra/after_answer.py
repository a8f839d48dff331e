"""Work a request finishes once its answer is sent: bells and log lines its caller does not wait for.

A single enqueue on the event loop rang Redis (the lane entry and the
doorbell) and wrote its transition's log line before answering. The caller
reads neither: a claim finds a task that has no lane entry yet through
Postgres (``queues.dispatch.claiming`` falls back to its scan), a long poll
hears a bell a moment later, and the log line is for the operator. Yet both
sat between the commit and the answer, a fifth of what a producer waits for.

The lean edge (``taskforge.http.lean``) opens a scope around each request
(:func:`answering`) and runs what was deferred into it right after the
answer's last byte is written, inside the request's own ASGI call, as
Starlette's background tasks do: uvicorn's graceful shutdown waits for it
as for the request, and the request's context (its id, in the log line) is
still set. Work deferred outside a scope (the thread pool, Django's path,
a test, a statement that serves several requests) runs at once, so a caller
never has to know where it runs. A crash between the answer and the work
loses a bell or a log line, never a task: Redis is rebuilt from Postgres.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator

logger = logging.getLogger("taskforge.http")

#: Work for after the answer: a function, or a coroutine function, of no arguments.
Work = Callable[[], Awaitable[None] | None]


class Deferred:
    """The work one request deferred, run once its answer is sent (:meth:`run`; again, it finds nothing)."""

    __slots__ = ("_open", "_works")

    def __init__(self) -> None:
        self._works: list[Work] = []
        self._open = True

    def keep(self, work: Work) -> bool:
        """Keep ``work`` for :meth:`run`; False once the answer is sent (the caller then runs it)."""
        if self._open:
            self._works.append(work)
        return self._open

    async def run(self) -> None:
        """Run the work deferred so far, in order; whatever is deferred from now on runs at once."""
        self._open = False
        works, self._works = self._works, []
        for work in works:
            try:
                outcome = work()
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                # The answer is sent: all that is left to do with an error is to say so.
                logger.exception("work after the answer failed", extra={"event": "after_answer.error"})


_scope: contextvars.ContextVar[Deferred | None] = contextvars.ContextVar("after_answer", default=None)


@contextlib.contextmanager
def answering() -> Iterator[Deferred]:
    """A request's scope: work deferred within it waits for the :class:`Deferred` yielded to run."""
    deferred = Deferred()
    token = _scope.set(deferred)
    try:
        yield deferred
    finally:
        _scope.reset(token)


async def after_answer(work: Work) -> None:
    """Run ``work`` once the request's answer is sent; at once when there is no request (or it was answered)."""
    deferred = _scope.get()
    if deferred is not None and deferred.keep(work):
        return
    outcome = work()
    if inspect.isawaitable(outcome):
        await outcome


def detached() -> contextvars.Context:
    """A copy of the current context outside any request's scope: for tasks that serve several requests."""
    context = contextvars.copy_context()
    context.run(_scope.set, None)
    return context
