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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponseBase
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
