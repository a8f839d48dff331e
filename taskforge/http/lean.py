"""The lean edge: the hottest API calls answered without Django's request machinery.

A single enqueue, claim, heartbeat, ack or nack spent most of its CPU in
Django's handler, its middleware chain, DRF's dispatch and the thread
hand-offs of the WSGI bridge, not in TaskForge. The apps register those
exact paths and methods here (``queues.api.hot``, ``workers.hot``) with a
handler that calls the *same* function the DRF view calls (validation,
authentication and the role check included); this module gives it what
Django's path gave it, from the same shared functions:

* the request id (``X-Request-ID``) and the access log line
  (``taskforge.http.middleware``), and the request metrics
  (``taskforge.ops.request_metrics``), counted once per request;
* the body rules of ``BodyLimitMiddleware`` (the cap itself stays in
  ``BodyCapMiddleware``, in front of this edge) and DRF's JSON parser;
* errors answered by ``taskforge.http.errors.error_answer``, as DRF views are;
* the headers Django's middleware adds to an API answer (computed once from
  Django's own middleware) and DRF's ``Allow``;
* one hop to the thread pool, with Django's request signals around the work
  (its database connection handling) and the request's context variables;
* a scope for work the call leaves for after its answer
  (``taskforge.infra.after_answer``), run once the answer is sent, before
  the access line, inside the request's own call.

Whatever this edge cannot answer exactly as Django would (another method, a
host Django would refuse, a script prefix, an HTTPS redirect) goes to Django
unchanged. This module imports no app.
"""

from __future__ import annotations

import asyncio
import contextvars
import io
import re
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from django.conf import settings
from django.core import signals
from django.http import HttpRequest, HttpResponse, QueryDict
from django.http.request import split_domain_port, validate_host
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import get_resolver

from taskforge.http.bodycap import BodyCapMiddleware
from taskforge.http.errors import connection_lost, error_answer
from taskforge.http.middleware import (
    caller_of,
    caller_var,
    log_access,
    request_id_for,
    request_id_var,
    unreadable_body,
)
from taskforge.http.parsers import StrictJSONParser
from taskforge.http.renderers import FastJSONRenderer
from taskforge.infra import rowcache
from taskforge.infra.after_answer import Deferred, answering
from taskforge.ops.request_metrics import record_request

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
T = TypeVar("T")

#: An answer: its status and its JSON-able body.
Answer = tuple[int, Any]
#: Runs a synchronous function on the thread pool as Django would run a view (see LeanEdge.in_thread).
InThread = Callable[[Callable[[], T]], Awaitable[T]]

_PARSER = StrictJSONParser()
_RENDERER = FastJSONRenderer()
_JSON = (b"content-type", b"application/json")
_FOUND = "taskforge.lean.route"  # the scope key of the route found, past the body cap
_HOSTS_KEPT = 256  # Host headers whose check is remembered (a deployment sees a handful)


@dataclass(frozen=True)
class LeanCall:
    """One request, as much of it as the handlers read."""

    method: str
    path: str
    view_class: type  # the DRF view Django would have served it with: its declared roles apply
    params: dict[str, str]  # the path's named groups
    query_string: str  # decoded as Django decodes it for request.GET
    authorization: str
    content_type: str
    body: bytes
    receive: Receive  # the body is read: what comes next is the client leaving (http.disconnect)

    @cached_property
    def query(self) -> QueryDict:
        """The query string as Django's ``request.GET`` reads it (built when a handler reads it: few do)."""
        return QueryDict(self.query_string)

    def json(self) -> Any:
        """The body as DRF's ``request.data`` gives it: ``{}`` when empty, else the strict parser's value."""
        if not self.body:
            return {}
        return _PARSER.parse(io.BytesIO(self.body), self.content_type)


#: A route's handler: the call and the way to the thread pool in, the answer out (or an exception);
#: None when there is nobody left to answer (a long poll whose client left).
Handler = Callable[[LeanCall, "InThread[Any]"], Awaitable[Answer | None]]


@dataclass(frozen=True)
class Route:
    """``method`` on the paths of the URL named ``view_name``, served by ``handler``.

    The path pattern and the view class come from the project's URLs (one
    definition of the paths); ``allow_header`` is what DRF sends in ``Allow``.
    """

    method: str
    view_name: str
    handler: Handler
    pattern: re.Pattern[str] = field(init=False)
    # The paths an earlier URL takes first (Django tries them in order): "tasks/batch" is not a task id.
    shadowed_by: re.Pattern[str] | None = field(init=False)
    view_class: type = field(init=False)
    allow_header: bytes = field(init=False)

    def __post_init__(self) -> None:
        urls = get_resolver().url_patterns
        at = next(i for i, p in enumerate(urls) if getattr(p, "name", None) == self.view_name)
        url = urls[at]
        view_class = url.callback.cls  # type: ignore[union-attr]  # DRF's as_view() sets it
        view = view_class()
        view.setup(HttpRequest())  # as Django does per request: it adds HEAD where there is GET
        object.__setattr__(self, "pattern", url.pattern.regex)
        object.__setattr__(self, "shadowed_by", _first_of(urls[:at]))
        object.__setattr__(self, "view_class", view_class)
        object.__setattr__(self, "allow_header", ", ".join(view.allowed_methods).encode())


_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


def _first_of(urls: Sequence[Any]) -> re.Pattern[str] | None:
    """One pattern that matches a path when any of ``urls`` (Django's URL patterns and includes) does."""
    # Python refuses a group name twice in one pattern: the alternatives keep their groups unnamed.
    alternatives = [_NAMED_GROUP.sub("(?:", url.pattern.regex.pattern) for url in urls]
    return re.compile("|".join(f"(?:{one})" for one in alternatives)) if alternatives else None


def _django_headers(secure: bool) -> list[tuple[bytes, bytes]]:
    """The headers Django's middleware adds to every API answer, as its own middleware computes them."""
    request = HttpRequest()
    request.META["wsgi.url_scheme"] = "https" if secure else "http"
    request.is_secure = lambda: secure  # type: ignore[method-assign]
    response = HttpResponse()
    del response["Content-Type"]
    response = SecurityMiddleware(lambda r: response).process_response(request, response)
    response = XFrameOptionsMiddleware(lambda r: response).process_response(request, response)
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in response.items()]


class LeanEdge:
    """ASGI: serve ``routes``; anything else, or anything they cannot serve as Django would, goes to ``django``."""

    def __init__(self, routes: Iterable[Route], django: ASGIApp, executor: Executor) -> None:
        self.routes: dict[str, list[Route]] = {}
        for route in routes:
            self.routes.setdefault(route.method, []).append(route)
        self.django = django
        self.executor = executor
        self._capped = BodyCapMiddleware(self._serve_found)
        self.enabled = not (
            settings.USE_X_FORWARDED_HOST
            or settings.SECURE_SSL_REDIRECT
            or settings.FORCE_SCRIPT_NAME
            or settings.DISALLOWED_USER_AGENTS
        )
        self.headers = {secure: _django_headers(secure) for secure in (False, True)}
        self.allowed_hosts = settings.ALLOWED_HOSTS
        self._hosts_checked: dict[bytes, bool] = {}  # Host headers seen, and whether ALLOWED_HOSTS allows each
        proxy: tuple[str, str] | None = settings.SECURE_PROXY_SSL_HEADER  # as HttpRequest.is_secure reads it
        self.proxy_ssl_header = (
            (proxy[0].removeprefix("HTTP_").lower().replace("_", "-").encode("latin-1"), proxy[1]) if proxy else None
        )
        if settings.DEBUG and not self.allowed_hosts:  # Django's own rule (HttpRequest.get_host)
            self.allowed_hosts = [".localhost", "127.0.0.1", "[::1]"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self._route(scope) if self.enabled and scope["type"] == "http" else None
        if found is None:
            await self.django(scope, receive, send)
            return
        # The body cap first, as in front of Django: past it, a 413 and nothing read further.
        await self._capped({**scope, _FOUND: found}, receive, send)

    async def _serve_found(self, scope: Scope, receive: Receive, send: Send) -> None:
        route, params, headers = scope[_FOUND]
        await self._serve(route, params, headers, scope, receive, send)

    def _route(self, scope: Scope) -> tuple[Route, dict[str, str], dict[bytes, bytes]] | None:
        routes = self.routes.get(scope["method"])
        if not routes or scope.get("root_path"):
            return None
        path = scope["path"][1:]
        for route in routes:
            matched = route.pattern.match(path)
            if matched is not None:
                if route.shadowed_by is not None and route.shadowed_by.match(path):
                    return None  # Django's earlier URL serves it
                headers = dict(scope["headers"])  # HTTP/1.1 names arrive lower-cased
                if not self._host_allowed(headers.get(b"host")):
                    return None  # Django answers it (400)
                return route, matched.groupdict(), headers
        return None

    def _host_allowed(self, host: bytes | None) -> bool:
        if not host:
            return False
        allowed = self._hosts_checked.get(host)
        if allowed is None:
            domain, _ = split_domain_port(host.decode("latin-1"))
            allowed = bool(domain) and validate_host(domain, self.allowed_hosts)
            if len(self._hosts_checked) >= _HOSTS_KEPT:  # clients choose the header: keep the set bounded
                self._hosts_checked.clear()
            self._hosts_checked[host] = allowed
        return allowed

    def _secure(self, scope: Scope, headers: dict[bytes, bytes]) -> bool:
        if self.proxy_ssl_header is not None:
            name, secure_value = self.proxy_ssl_header
            offered = headers.get(name)
            if offered is not None:
                return offered.decode("latin-1").split(",", 1)[0].strip() == secure_value
        return bool(scope.get("scheme") == "https")

    async def _serve(
        self,
        route: Route,
        params: dict[str, str],
        headers: dict[bytes, bytes],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        started = time.perf_counter()
        message = await receive()  # whole: BodyCapMiddleware joined it and declared its length
        if message["type"] != "http.request":
            return  # the client left before sending it
        body: bytes = message.get("body", b"")
        request_id = request_id_for(headers.get(b"x-request-id", b"").decode("latin-1"))
        token = request_id_var.set(request_id)
        client = scope.get("client")
        caller = caller_var.set(
            caller_of(
                client[0] if client else "-",
                headers.get(b"x-forwarded-for", b"").decode("latin-1"),
                headers.get(b"user-agent", b"").decode("latin-1"),
            )
        )
        try:
            with answering() as deferred:
                try:
                    await self._respond(
                        route, params, headers, scope, receive, send, body, request_id, started, deferred
                    )
                finally:
                    await deferred.run()  # the call failed or its client left: what it deferred is owed all the same
        finally:
            caller_var.reset(caller)
            request_id_var.reset(token)

    async def _respond(
        self,
        route: Route,
        params: dict[str, str],
        headers: dict[bytes, bytes],
        scope: Scope,
        receive: Receive,
        send: Send,
        body: bytes,
        request_id: str,
        started: float,
        deferred: Deferred,
    ) -> None:
        """The body's refusal, or the handler's answer or error; then the deferred work, the access line, metrics."""
        refusal = unreadable_body(
            headers.get(b"content-encoding", b"").decode("latin-1").strip().lower(),
            headers.get(b"content-type", b"").decode("latin-1"),
            body,
        )
        view_name: str | None = route.view_name
        secure = self._secure(scope, headers)
        if refusal is not None:  # answered before Django's later middleware: none of its headers
            view_name = None  # nor had Django resolved the view yet
            status = refusal.status_code
            content = refusal.content
            extra = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in refusal.items()]
        else:
            call = LeanCall(
                method=scope["method"],
                path=scope["path"],
                view_class=route.view_class,
                params=params,
                query_string=scope.get("query_string", b"").decode(errors="replace"),  # as WSGIRequest.GET
                authorization=headers.get(b"authorization", b"").decode("latin-1"),
                content_type=headers.get(b"content-type", b"").decode("latin-1"),
                body=body,
                receive=receive,
            )
            extra_headers: dict[str, str] = {}
            try:
                answer = await route.handler(call, self.in_thread)
            except Exception as exc:  # every error is answered, as DRF's handler does
                answer = None
                status, data, extra_headers = error_answer(exc)
            else:
                if answer is None:
                    return  # the client left: no answer, no log line, not counted
                status, data = answer
            content = _RENDERER.render(data)
            extra = [_JSON, (b"allow", route.allow_header), *self.headers[secure]]
            extra += [
                (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in extra_headers.items()
            ]
        extra.append((b"content-length", str(len(content)).encode()))
        extra.append((b"x-request-id", request_id.encode()))
        await send({"type": "http.response.start", "status": status, "headers": extra})
        await send({"type": "http.response.body", "body": content, "more_body": False})
        await deferred.run()  # the bells and transition lines the call left for after its answer
        log_access(scope["method"], scope["path"], status, started)
        ajax = headers.get(b"x-requested-with") == b"XMLHttpRequest"  # as django-prometheus reads it
        record_request(scope["method"], view_name, status, len(body), content, started, secure=secure, ajax=ajax)

    async def in_thread(self, work: Callable[[], T]) -> T:
        """Run ``work`` on the thread pool as Django runs a view.

        Django's request signals around it close a broken or finished
        database connection (its pool takes it back), the request's context
        (its id) goes along, and the API key cache keeps one view of the keys
        for the whole call (``rowcache.request_scope``).
        """
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.executor, context.run, _as_a_request, work)


def _as_a_request[T](work: Callable[[], T]) -> T:
    signals.request_started.send(sender=LeanEdge)
    try:
        with rowcache.request_scope():
            return work()
    except Exception as exc:
        lost = connection_lost(exc)  # here, on the thread whose connection it was
        if lost is exc:
            raise
        raise lost from exc
    finally:
        signals.request_finished.send(sender=LeanEdge)
