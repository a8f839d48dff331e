"""Serving a DRF view whose answer may have to wait, without holding a thread.

DRF views are synchronous. :class:`LongPollView` keeps everything DRF does
(authentication, the 401/403 order, parsing, validation, the error handler)
in the synchronous handler, and lets that handler hand its response to an
``async`` continuation (:func:`finish_later`): the view Django sees is an
``async`` function that runs the DRF part in a thread, then awaits the
continuation on the event loop. Under the ASGI server a long poll therefore
waits on an ``asyncio`` event: it holds no database connection and no server
worker, and does no work until a doorbell rings. (Django under ASGI still
keeps one idle executor thread per open request for its sync middleware;
it is parked, not busy.)

Most claims need no wait: under load, tasks are there. Django's ASGI handler
costs a new executor thread per request, so :class:`ThreadedFirst` sends a
long poll to the thread pool first (``taskforge.asgi``), where
:class:`AttemptHandler` resolves it to the view's synchronous form with
``threaded_attempt`` set. That view answers at once when it can, and
:func:`must_wait` when it would have to wait: the request is then run again,
from the start, through Django's ASGI handler on the event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from rest_framework.response import Response
from rest_framework.views import APIView

from queues import dispatch

Continuation = Callable[[], Awaitable[Any]]


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
        """The plain DRF view, for a threaded attempt that never waits."""
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


MUST_WAIT = "X-TaskForge-Must-Wait"
_MUST_WAIT = MUST_WAIT.lower().encode()

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


def must_wait() -> HttpResponse:
    """The threaded attempt's answer when it would have to wait (never seen by a client)."""
    response = HttpResponse(status=204)
    response[MUST_WAIT] = "1"
    response.not_for_the_client = True  # type: ignore[attr-defined]  # no access log line
    return response


class AttemptHandler(WSGIHandler):
    """Django's WSGI handler with its own URLs: the threaded attempts' synchronous views."""

    def __init__(self, urlconf: str) -> None:
        super().__init__()
        self.urlconf = urlconf

    def get_response(self, request: HttpRequest) -> HttpResponseBase:
        request.urlconf = self.urlconf
        return super().get_response(request)


class ThreadedFirst:
    """ASGI: try ``threaded``; if it answers :func:`must_wait`, run the request on ``evented``."""

    def __init__(self, threaded: ASGIApp, evented: ASGIApp) -> None:
        self.threaded = threaded
        self.evented = evented

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        # The body is small and whole (BodyCapMiddleware): keep it to replay.
        kept = await receive()
        pending: Message | None = kept
        waiting = False

        async def replay() -> Message:
            nonlocal pending
            if pending is not None:
                message, pending = pending, None
                return message
            return await receive()

        async def unless_waiting(message: Message) -> None:
            nonlocal waiting
            if message["type"] == "http.response.start":
                waiting = any(name == _MUST_WAIT for name, _ in message.get("headers", []))
            if not waiting:
                await send(message)

        await self.threaded(scope, replay, unless_waiting)
        if waiting:
            pending = kept
            await self.evented(scope, replay, send)
