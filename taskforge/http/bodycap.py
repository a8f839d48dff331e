"""The request-body cap at the ASGI edge, while the body is still streaming in.

Django's ASGI handler reads a whole request body (to memory, then a temporary
file) before any middleware runs, so ``BodyLimitMiddleware`` alone would still
let a client stream gigabytes to disk, declared or chunked, before hearing 413.
This wrapper reads at most ``TASKFORGE_MAX_PAYLOAD_BYTES + 1`` bytes: past the
cap it answers 413 at once and stops reading. Bodies within the cap are handed
to Django unchanged (one message, with its length declared), and later
``receive()`` calls still reach the server, so disconnects are seen as before.

Every path goes through it, the admin's and the dashboard's forms included:
Django reads a body on one of the request threads, so a client trickling a
form body at ``/admin/login/`` would hold that thread for as long as it
likes, and a few dozen such clients would stall the worker protocol. Here the
body is read on the event loop, whole, within ``TASKFORGE_BODY_TIMEOUT_SECONDS``
(a 400 after that), before any thread is involved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson
from django.conf import settings

from taskforge.http.errors import error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyCapMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = settings.TASKFORGE_MAX_PAYLOAD_BYTES
        if _declared_length(scope) > limit:
            await _refuse(send, 413, "payload_too_large", f"request body exceeds {limit} bytes")
            return
        try:
            async with asyncio.timeout(settings.TASKFORGE_BODY_TIMEOUT_SECONDS):
                read = await _read_whole(receive, limit)
        except TimeoutError:
            # The contract's codes have no timeout: a body that never arrives is bad input.
            seconds = settings.TASKFORGE_BODY_TIMEOUT_SECONDS
            await _refuse(send, 400, "validation_error", f"the request body did not arrive within {seconds} s")
            return
        if read is None:
            await _refuse(send, 413, "payload_too_large", f"request body exceeds {limit} bytes")
        elif read["type"] != "http.request":  # the client left before sending it all
            await self.app(scope, _replay([read], receive), send)
        else:
            await self.app(_with_length(scope, len(read["body"])), _replay([read], receive), send)


async def _read_whole(receive: Receive, limit: int) -> Message | None:
    """The body as one ``http.request`` message; the disconnect if the client left; None past ``limit``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return message
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            return None
        chunks.append(body)
        if not message.get("more_body", False):
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}


def _declared_length(scope: Scope) -> int:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0  # malformed: the Django middleware answers it with a 400
    return 0


def _with_length(scope: Scope, size: int) -> Scope:
    """The scope of a body now held whole: its length declared, as WSGI needs.

    A chunked request declares no length, and a WSGI application reads only
    ``CONTENT_LENGTH`` bytes of it (Django reads none).
    """
    headers = [(name, value) for name, value in scope.get("headers", []) if name not in _LENGTH_HEADERS]
    headers.append((b"content-length", str(size).encode()))
    return {**scope, "headers": headers}


_LENGTH_HEADERS = (b"content-length", b"transfer-encoding")


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    body = orjson.dumps(error_body(code, message))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                # The rest of the body is never read: the connection cannot be reused.
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
