"""Request id and body guards, in front of every view.

The body guard runs before any parsing: an oversized body is refused with a
413 whether or not it declares a ``Content-Length``, and a body TaskForge
cannot read (compressed, non-UTF-8, not JSON) with a 415.
"""

from __future__ import annotations

import contextvars
import logging
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from taskforge.http.errors import error_body
from taskforge.infra import rowcache
from taskforge.ops.client_address import address_of
from taskforge.ops.logs import log_line

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


@dataclass(frozen=True)
class Caller:
    """Who sent the request in hand, as it arrived; the worker registry reads it at most once a second."""

    remote: str
    forwarded_for: str
    agent: str

    @property
    def address(self) -> str:
        """The client's address, trusted proxies honoured (worked out only when asked: not per request)."""
        return address_of(self.remote, self.forwarded_for)


#: The caller of the request in hand (both edges set it): the worker registry records it.
caller_var: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("caller", default=None)


def caller_of(remote: str, forwarded_for: str, agent: str) -> Caller:
    return Caller(remote, forwarded_for, agent[:200])


_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
access_log = logging.getLogger("taskforge.request")

# Browser-facing pages post forms; the JSON rules apply to the API only.
_FORM_PREFIXES = ("/admin/", "/dashboard/")


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        return True


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_for(request.headers.get("X-Request-ID", ""))
        token = request_id_var.set(request_id)
        caller = caller_var.set(
            caller_of(
                str(request.META.get("REMOTE_ADDR") or "-"),
                request.headers.get("X-Forwarded-For", ""),
                request.headers.get("User-Agent", ""),
            )
        )
        started = time.perf_counter()
        try:
            with rowcache.request_scope():
                response = self.get_response(request)
            response["X-Request-ID"] = request_id
            if getattr(response, "not_for_the_client", False):
                return response  # an internal first attempt (workers.longpoll): the real answer is logged
            log_access(request.method or "", request.path, response.status_code, started)
            return response
        finally:
            caller_var.reset(caller)
            request_id_var.reset(token)


def request_id_for(offered: str) -> str:
    """The id of a request: the client's own if it is a sane one, else a new one."""
    return offered if _REQUEST_ID.match(offered) else secrets.token_hex(16)


def log_access(method: str, path: str, status: int, started: float) -> None:
    """The access log line of one answered request (``started``: its ``time.perf_counter()``)."""
    duration_ms = round((time.perf_counter() - started) * 1000, 1)
    # A 5xx is something to look at; everything else is routine.
    log_line(
        access_log,
        logging.WARNING if status >= 500 else logging.INFO,
        f"{method} {path} {status} ({duration_ms:.1f} ms)",
        {"event": "http.request", "method": method, "path": path, "status": status, "duration_ms": duration_ms},
    )


def _refuse(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(error_body(code, message), status=status)


class BodyLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method in ("POST", "PUT", "PATCH", "DELETE") and not request.path.startswith(_FORM_PREFIXES):
            refusal = self._guard(request)
            if refusal is not None:
                return refusal
        return self.get_response(request)

    def _guard(self, request: HttpRequest) -> JsonResponse | None:
        limit = settings.TASKFORGE_MAX_PAYLOAD_BYTES
        encoding = request.headers.get("Content-Encoding", "").strip().lower()
        if encoding and encoding != "identity":
            return unreadable_body(encoding, "", b"")
        declared = request.META.get("CONTENT_LENGTH") or ""
        try:
            declared_length = int(declared) if declared else None
        except ValueError:
            return _refuse(400, "validation_error", "invalid Content-Length")
        if declared_length is not None and declared_length > limit:
            return _refuse(413, "payload_too_large", f"request body exceeds {limit} bytes")
        # Read at most limit + 1 bytes: enough to know it is too big, never more.
        body = request.read(limit + 1)
        if len(body) > limit:
            return _refuse(413, "payload_too_large", f"request body exceeds {limit} bytes")
        request._body = body  # later readers see the bytes we read
        request.META["CONTENT_LENGTH"] = str(len(body))
        return unreadable_body(encoding, request.META.get("CONTENT_TYPE", ""), body)


def unreadable_body(content_encoding: str, content_type: str, body: bytes) -> JsonResponse | None:
    """The 415 for a body (whole, within the cap) TaskForge cannot read, else None.

    ``content_encoding`` as sent, lower-cased and stripped.
    """
    if content_encoding and content_encoding != "identity":
        return _refuse(415, "unsupported_media_type", f"Content-Encoding {content_encoding!r} is not accepted")
    if body:
        media_type = content_type.split(";")[0].strip().lower()
        if media_type != "application/json":
            return _refuse(415, "unsupported_media_type", "request bodies must be application/json")
    return None
