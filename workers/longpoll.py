"""Long polls that wait on the event loop, holding no thread and no database connection.

Under TaskForge's ASGI app (``taskforge.asgi``) a claim is a series of
*attempts*. :class:`LongPoll` runs the request through Django's WSGI handler
on the thread pool, where :class:`AttemptHandler` resolves it to the view's
synchronous form (``threaded_attempt``). An attempt that finds work answers at
once. One that finds none answers :func:`must_wait` instead (never seen by the
client), saying what to wait for; LongPoll then waits for the process's
doorbell (``queues.dispatch.doorbell``) on the event loop, and runs the request again.
When the wait is over, a last attempt answers what it finds, an empty list
included. Every attempt is the whole request (authentication, validation, the
error handler), so every answer comes from the one DRF code path; an attempt
that finds nothing costs about a millisecond.

Elsewhere (Django's test client, a plain WSGI or ASGI server) the claim view is
a :class:`LongPollView`: its DRF part runs in a thread and hands the response
to an ``async`` continuation that waits (:func:`finish_later`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import asdict, dataclass
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from rest_framework.response import Response
from rest_framework.views import APIView

from queues import dispatch
from queues.dispatch import doorbell

Continuation = Callable[[], Awaitable[Any]]
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Set by LongPoll on every attempt (a client's own copy is dropped): first, again or last.
ATTEMPT = "X-TaskForge-Attempt"
_ATTEMPT = ATTEMPT.lower().encode()
# On an attempt's answer when it found nothing: what to wait for (JSON).
MUST_WAIT = "X-TaskForge-Must-Wait"
_MUST_WAIT = MUST_WAIT.lower().encode()


# -- inside Django ------------------------------------------------------------------


def finish_later(response: Response, continuation: Continuation) -> Response:
    """Mark ``response`` (not rendered yet) to get its data from ``continuation``.

    The database connection goes back to the pool now: the continuation may
    wait a long time, and takes one again only when it has work to do.
    """
    dispatch.release_connection()
    response.continuation = continuation  # type: ignore[attr-defined]
    return response


class LongPollView(APIView):
    @classmethod
    def as_sync_view(cls, **initkwargs: Any) -> Callable[..., Any]:
        """The plain DRF view, for LongPoll's attempts (which never wait)."""
        return super().as_view(**initkwargs)

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Callable[..., Any]:
        sync_view = super().as_view(**initkwargs)
        run_sync_view = sync_to_async(sync_view)

        async def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            response = await run_sync_view(request, *args, **kwargs)
            continuation = getattr(response, "continuation", None)
            if continuation is not None:
                del response.continuation
                # Not rendered yet: Django renders it after the view returns.
                response.data = await continuation()
            return response

        # What DRF's as_view() exposes (the schema generator reads view.cls).
        view.cls = cls  # type: ignore[attr-defined]
        view.initkwargs = initkwargs  # type: ignore[attr-defined]
        view.csrf_exempt = True  # type: ignore[attr-defined]
        return view


@dataclass(frozen=True)
class WaitFor:
    queue: str | None  # None: any queue
    max_tasks: int
    wait_seconds: float
    retry_after: float | None = None  # a rate-limited queue's next token


def attempt(request: HttpRequest) -> str | None:
    """Which of LongPoll's attempts this request is (first, again, last), or None outside LongPoll."""
    return request.headers.get(ATTEMPT)


def must_wait(wait: WaitFor) -> HttpResponse:
    """An attempt's answer when it found nothing: LongPoll waits, then asks again."""
    response = HttpResponse(status=204)
    response[MUST_WAIT] = orjson.dumps(asdict(wait)).decode()
    response.not_for_the_client = True  # type: ignore[attr-defined]  # no access log line, no metrics
    return response


class AttemptHandler(WSGIHandler):
    """Django's WSGI handler with its own URLs: the synchronous views of LongPoll's attempts."""

    def __init__(self, urlconf: str) -> None:
        super().__init__()
        self.urlconf = urlconf

    def get_response(self, request: HttpRequest) -> HttpResponseBase:
        request.urlconf = self.urlconf
        return super().get_response(request)


# -- at the ASGI edge ---------------------------------------------------------------


class LongPoll:
    """ASGI: run the request as attempts on ``attempts`` (the thread pool), waiting between them."""

    def __init__(self, attempts: ASGIApp) -> None:
        self.attempts = attempts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await receive()  # whole and small: BodyCapMiddleware capped and joined it
        if body["type"] != "http.request":
            return  # the client left before sending it
        headers = [(name, value) for name, value in scope.get("headers", []) if name != _ATTEMPT]
        loop = asyncio.get_running_loop()
        left = asyncio.ensure_future(receive())  # the only other message that can come: http.disconnect
        try:
            async with contextlib.AsyncExitStack() as stack:
                waiter: doorbell.Waiter | None = None
                deadline = 0.0
                kind = b"first"
                while True:
                    if waiter is not None:
                        waiter.event.clear()  # before the attempt: a bell during it counts
                    attempt_scope = {**scope, "headers": [*headers, (_ATTEMPT, kind)]}
                    wait = await self._attempt(attempt_scope, body, send)
                    if wait is None or kind == b"last":
                        return
                    if waiter is None:
                        # Registered now: try once more, a bell may have rung since the attempt.
                        hub = doorbell.hub()
                        waiter = await stack.enter_async_context(hub.waiter(wait.queue, wait.max_tasks))
                        deadline = loop.time() + wait.wait_seconds
                        kind = b"again"
                        continue
                    timeout = min(deadline - loop.time(), hub.recheck_seconds)
                    if wait.retry_after is not None:
                        timeout = min(timeout, max(wait.retry_after, 0.01))
                    if timeout > 0:
                        rang = asyncio.ensure_future(waiter.event.wait())
                        await asyncio.wait((rang, left), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                        rang.cancel()
                        if left.done():
                            return  # the client is gone: nothing to claim for
                    kind = b"last" if loop.time() >= deadline else b"again"
        finally:
            left.cancel()

    async def _attempt(self, scope: Scope, body: Message, send: Send) -> WaitFor | None:
        """One run of the request; its answer goes to the client unless it says to wait."""
        unread = True
        wait: WaitFor | None = None

        async def replay() -> Message:
            nonlocal unread
            if unread:
                unread = False
                return body
            return {"type": "http.request", "body": b"", "more_body": False}

        async def answer(message: Message) -> None:
            nonlocal wait
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", []):
                    if name == _MUST_WAIT:
                        wait = WaitFor(**orjson.loads(value))
            if wait is None:
                await send(message)

        await self.attempts(scope, replay, answer)
        return wait
