"""Long polls: a claim that finds nothing, or a read of a task that has not
settled, waits on the event loop, holding no thread and no connection.

A claim is a series of *attempts*. Each attempt is the whole request
(authentication, validation, the error handler), run synchronously by the
claim view, and never waits: one that finds work, or has no time to wait,
answers at once; one that finds nothing answers :func:`must_wait` instead
(never seen by the client), saying what to wait for. :func:`long_poll`, the
one wait loop, then waits for the process's doorbell (``queues.dispatch.doorbell``)
on the event loop and runs the request again. When the wait is over, a last
attempt answers what it finds, an empty list included. An attempt that finds
nothing costs about a millisecond, and every answer comes from the one DRF
code path.

The loop runs in one of three places, with the same attempts:

* at the lean edge (``taskforge.http.lean`` with ``workers.hot``), which
  serves claims in production: each attempt is ``workers.views.claim_once``
  on the thread pool, without Django's request machinery;
* at the ASGI edge (``taskforge.asgi``), for a claim the lean edge leaves to
  Django, :class:`LongPoll` runs each attempt
  through Django's WSGI handler on the thread pool (:class:`AttemptHandler`
  with ``workers.attempt_urls``): no thread is held while a poll waits, and no
  claim pays for Django's ASGI bridge;
* wherever the view is served without that edge (Django's test client,
  ``runserver``, a plain WSGI server), :meth:`LongPollView.as_view` runs the
  attempts itself, from an ``async`` view.

Why here and not in ``queues.dispatch``: waiting is a property of serving the
worker protocol over HTTP (replaying a request, the client leaving, which
answer the client sees); dispatch stays synchronous and request-free, one
claim attempt at a time, and owns only the doorbell this loop waits on.

The same loop serves producers waiting for a result
(``GET .../tasks/{id}?wait_seconds=N``, ``queues.api.results``): an attempt
reads the task and answers it once settled; until then it answers a
:class:`WaitFor` naming the task, and the wait ends on that task's bell.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import asdict, dataclass
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from rest_framework.views import APIView

from queues.dispatch import doorbell
from taskforge.http.lean import Answer, LeanCall

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Set on every attempt (a client's own copy is dropped): which attempt of the poll it is.
ATTEMPT = "X-TaskForge-Attempt"
_ATTEMPT = ATTEMPT.lower().encode()
_ATTEMPT_META = "HTTP_" + ATTEMPT.upper().replace("-", "_")
FIRST, AGAIN, LAST = "first", "again", "last"
# On an attempt's answer when it found nothing: what to wait for (JSON).
MUST_WAIT = "X-TaskForge-Must-Wait"
_MUST_WAIT = MUST_WAIT.lower().encode()
_AUTHORIZATION = b"authorization"
# At most one warning a minute per key that hits the cap.
_CAP_WARNING_SECONDS = 60.0

logger = logging.getLogger("taskforge.longpoll")


@dataclass(frozen=True)
class WaitFor:
    queue: str | None  # None: any queue
    max_tasks: int
    wait_seconds: float
    retry_after: float | None = None  # a rate-limited queue's next token
    task_id: str | None = None  # set: wait for this task to settle, not for claimable tasks


#: Runs one attempt of the request (FIRST, AGAIN or LAST); None when it answered the client.
Attempt = Callable[[str], Awaitable[WaitFor | None]]


def attempt(request: HttpRequest) -> str | None:
    """Which attempt of a long poll this request is (FIRST, AGAIN, LAST); None outside one."""
    return request.META.get(_ATTEMPT_META)


def must_wait(wait: WaitFor) -> HttpResponse:
    """An attempt's answer when it found nothing: the poll waits, then asks again."""
    response = HttpResponse(status=204)
    response[MUST_WAIT] = orjson.dumps(asdict(wait)).decode()
    response.not_for_the_client = True  # type: ignore[attr-defined]  # no access log line, no metrics
    return response


def _waiting_for(raw: str | bytes | None) -> WaitFor | None:
    return None if raw is None else WaitFor(**orjson.loads(raw))


# -- the per-key cap ----------------------------------------------------------------


class WaitingPolls:
    """How many polls wait in this process per API key, capped at ``TASKFORGE_MAX_LONG_POLLS_PER_KEY``.

    A waiting poll holds no thread and no connection, but it holds a socket and
    a little memory, and a runaway client (or a leaked key) could open them by
    the thousand. Past the cap a poll does not wait: its attempt at once is the
    last and answers what it finds, as with ``wait_seconds`` 0. Keys are told
    apart by a digest of the Authorization header (the attempts authenticate
    it; the cap never needs the database). Only the event loop's thread uses it.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._warned: dict[str, float] = {}

    @contextlib.contextmanager
    def slot(self, owner: str | None) -> Iterator[bool]:
        """True (and counted until the block ends) when ``owner`` may wait one more poll."""
        if owner is None:
            yield True
            return
        if self.counts[owner] >= settings.TASKFORGE_MAX_LONG_POLLS_PER_KEY:
            self._warn(owner)
            yield False
            return
        self.counts[owner] += 1
        try:
            yield True
        finally:
            self.counts[owner] -= 1
            if not self.counts[owner]:
                del self.counts[owner]

    def _warn(self, owner: str) -> None:
        now = time.monotonic()
        if now - self._warned.get(owner, -_CAP_WARNING_SECONDS) >= _CAP_WARNING_SECONDS:
            self._warned[owner] = now
            logger.warning(
                "a key holds %d waiting long polls in this process: further polls answer without waiting",
                settings.TASKFORGE_MAX_LONG_POLLS_PER_KEY,
                extra={"event": "longpoll.capped", "key_digest": owner[:12]},
            )


WAITING = WaitingPolls()


def poll_owner(authorization: bytes | str | None) -> str | None:
    """Who a poll counts against: a digest of its Authorization header (None without one)."""
    if not authorization:
        return None
    raw = authorization.encode() if isinstance(authorization, str) else authorization
    return hashlib.sha256(raw).hexdigest()


# -- the wait loop ------------------------------------------------------------------


async def long_poll(
    run_attempt: Attempt, client_left: asyncio.Future[Any] | None = None, *, owner: str | None = None
) -> None:
    """Run attempts until one answers, waiting for the doorbell between them.

    1. The first attempt runs unregistered: a claim that finds work never
       waits on the doorbell hub (it only notes where the hub's hearing stood
       before the attempt, :meth:`~queues.dispatch.doorbell.Hub.mark`).
    2. One that must wait registers with the hub (subscribed to the doorbell
       channel) and tries again at once: a bell that rang between the first
       attempt and the registration would otherwise be lost. A claim whose
       hub was listening all along and heard no claim bell since that mark
       skips this attempt and waits (in a trickle, where every new task is
       claimed by one poll and the next poll begins at once, that attempt
       found nothing almost every time). A wait for a task's result always
       makes it: the task's channel is subscribed only at the registration.
    3. Each later attempt clears the waiter's event first, so a bell that
       rings during the attempt counts.
    4. A wait ends on a bell, on a rate-limited queue's next token, on the
       hub's re-check timer (a safety net for a lost bell), or when the
       client leaves (there is nobody to claim for: no further attempt). The
       attempt at the deadline is the last; it answers whatever it finds.

    ``owner`` (:func:`poll_owner`) counts the poll against its key's cap
    (:class:`WaitingPolls`): past it, the second attempt is the last.
    """
    loop = asyncio.get_running_loop()
    async with contextlib.AsyncExitStack() as stack:
        hub: doorbell.Hub | None = None
        waiter: doorbell.Waiter | None = None
        deadline = 0.0
        kind = FIRST
        heard = doorbell.hub().mark()
        while True:
            if waiter is not None:
                waiter.event.clear()
            wait = await run_attempt(kind)
            if wait is None or kind == LAST:
                return
            if hub is None or waiter is None:
                if not stack.enter_context(WAITING.slot(owner)):
                    kind = LAST  # this key waits enough polls here already: answer what there is
                    continue
                hub = doorbell.hub()
                waiter = await stack.enter_async_context(hub.waiter(wait.queue, wait.max_tasks, task_id=wait.task_id))
                deadline = loop.time() + wait.wait_seconds
                kind = AGAIN
                if wait.task_id is not None or not hub.heard_nothing_since(heard):
                    continue
            timeout = min(deadline - loop.time(), hub.recheck_seconds)
            if wait.retry_after is not None:
                timeout = min(timeout, max(wait.retry_after, 0.01))
            if timeout > 0:
                rang = asyncio.ensure_future(waiter.event.wait())
                ends = {rang} if client_left is None else {rang, client_left}
                await asyncio.wait(ends, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                rang.cancel()
                if client_left is not None and client_left.done():
                    return
            kind = LAST if loop.time() >= deadline else AGAIN


# -- at the lean edge ---------------------------------------------------------------


async def lean_long_poll(call: LeanCall, attempt: Callable[[str], Awaitable[Answer | WaitFor]]) -> Answer | None:
    """Serve a lean-edge call as a long poll of ``attempt`` (FIRST, AGAIN or LAST).

    Each attempt is the whole request again (authentication included: a key
    revoked while the poll waited is refused). None: the client left while
    the poll waited, and nobody is owed an answer.
    """
    answered: list[Answer] = []

    async def run_attempt(kind: str) -> WaitFor | None:
        outcome = await attempt(kind)
        if isinstance(outcome, WaitFor):
            return outcome
        answered.append(outcome)
        return None

    left = asyncio.ensure_future(call.receive())  # the only message left to come: http.disconnect
    try:
        await long_poll(run_attempt, left, owner=poll_owner(call.authorization))
    finally:
        left.cancel()
    return answered[-1] if answered else None


# -- at the ASGI edge ---------------------------------------------------------------


class AttemptHandler(WSGIHandler):
    """Django's WSGI handler with its own URLs: the views of LongPoll's attempts."""

    def __init__(self, urlconf: str) -> None:
        super().__init__()
        self.urlconf = urlconf

    def get_response(self, request: HttpRequest) -> HttpResponseBase:
        request.urlconf = self.urlconf
        return super().get_response(request)


class LongPoll:
    """ASGI: run the request as attempts on ``attempts`` (the thread pool), waiting between them."""

    def __init__(self, attempts: ASGIApp) -> None:
        self.attempts = attempts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await receive()  # whole and small: BodyCapMiddleware capped and joined it
        if body["type"] != "http.request":
            return  # the client left before sending it
        headers = [(name, value) for name, value in scope.get("headers", []) if name != _ATTEMPT]

        async def run_attempt(kind: str) -> WaitFor | None:
            return await self._attempt({**scope, "headers": [*headers, (_ATTEMPT, kind.encode())]}, body, send)

        owner = poll_owner(next((value for name, value in headers if name == _AUTHORIZATION), None))
        left = asyncio.ensure_future(receive())  # the only other message that can come: http.disconnect
        try:
            await long_poll(run_attempt, left, owner=owner)
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
                        wait = _waiting_for(value)
            if wait is None:
                await send(message)

        await self.attempts(scope, replay, answer)
        return wait


# -- without the edge -----------------------------------------------------------------


class LongPollView(APIView):
    """A DRF view whose ``post`` may answer :func:`must_wait`."""

    @classmethod
    def as_attempt_view(cls, **initkwargs: Any) -> Callable[..., Any]:
        """The plain DRF view: one attempt, never waiting (LongPoll's attempts route here)."""
        return super().as_view(**initkwargs)

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Callable[..., Any]:  # type: ignore[override]
        """The view for the project's URLs: where no LongPoll stands in front, it runs the attempts."""
        attempt_view = cls.as_attempt_view(**initkwargs)

        async def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            answered: list[HttpResponseBase] = []

            def run_attempt(kind: str) -> WaitFor | None:
                # Read the body once, up front: each attempt's DRF request parses it again.
                _ = request.body
                request.META[_ATTEMPT_META] = kind
                response = attempt_view(request, *args, **kwargs)
                wait = _waiting_for(response.get(MUST_WAIT))
                if wait is None:
                    answered.append(response)
                else:
                    _release_connection()  # the wait may be long: the next attempt takes one again
                return wait

            await long_poll(sync_to_async(run_attempt), owner=poll_owner(request.META.get("HTTP_AUTHORIZATION")))
            return answered[-1]  # not rendered yet: Django renders it after the view returns

        # What DRF's as_view() exposes (the schema generator reads view.cls).
        view.cls = cls  # type: ignore[attr-defined]
        view.initkwargs = initkwargs  # type: ignore[attr-defined]
        view.csrf_exempt = True  # type: ignore[attr-defined]
        return view


def _release_connection() -> None:
    """Hand the database connection back to the pool while a poll waits.

    Inside a test's transaction the connection must stay (closing it would
    end the test's transaction).
    """
    if not connection.in_atomic_block:
        connection.close()
