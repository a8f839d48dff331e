"""The one place where every error becomes the contract's error shape.

``{"error": {"code": ..., "message": ..., "fields": {...}}}``; ``fields``
only for validation errors, and never a traceback.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from django import db
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response

logger = logging.getLogger("taskforge.http.errors")


class DomainError(Exception):
    """Base of the apps' errors: each subclass names its status and code."""

    status_code = 400
    code = "validation_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_DRF_CODES: dict[type[Exception], tuple[int, str]] = {
    drf.NotAuthenticated: (401, "unauthorized"),
    drf.AuthenticationFailed: (401, "unauthorized"),
    drf.PermissionDenied: (403, "forbidden"),
    drf.NotFound: (404, "not_found"),
    drf.MethodNotAllowed: (405, "method_not_allowed"),
    drf.UnsupportedMediaType: (415, "unsupported_media_type"),
    drf.ParseError: (400, "validation_error"),
    drf.ValidationError: (400, "validation_error"),
    drf.Throttled: (429, "throttled"),
}


def error_body(code: str, message: str, fields: dict[str, list[str]] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if fields:
        error["fields"] = fields
    return {"error": error}


def flatten_fields(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """Turn DRF's nested error detail into ``{"3.priority": [...]}``."""
    flat: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if key == "non_field_errors" and prefix:
                name = prefix
            flat.update(flatten_fields(value, name))
    elif isinstance(detail, list) and any(isinstance(item, (dict, list)) for item in detail):
        for index, value in enumerate(detail):
            if value:
                flat.update(flatten_fields(value, f"{prefix}.{index}" if prefix else str(index)))
    elif isinstance(detail, list):
        flat[prefix or "non_field_errors"] = [str(item) for item in detail]
    else:
        flat[prefix or "non_field_errors"] = [str(detail)]
    return flat


def _validation_message(fields: dict[str, list[str]]) -> str:
    if not fields:
        return "invalid request"
    name, messages = next(iter(fields.items()))
    if name == "non_field_errors":
        return messages[0]
    return f"{name}: {messages[0]}"


def connection_lost(
    exc: Exception, raw: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None = None
) -> Exception:
    """``exc`` as the unavailable database it was, when the connection it came from cannot go on.

    A server that goes away mid-call is not always reported as a lost
    connection. Through PgBouncer, a server connection terminated under a
    client makes the client's next ``BEGIN`` come back with an error as well as
    its own answer, which psycopg reports as an ``InternalError`` of its own
    ("received 2 results"): no SQLSTATE, because no server said it. Such a
    connection is out of step with its server and is closed here, so the pool
    throws it away; and the call, which did not run, may be repeated: a 503,
    not a 500. So is any error that left the connection broken. Call it on
    the thread that ran the statement (the connection is per thread), or
    name the connection that ran it (``raw``: on the event loop's pool).
    """
    if not isinstance(exc, db.DatabaseError) or isinstance(exc, (db.OperationalError, db.InterfaceError)):
        return exc
    if raw is None:
        raw = db.connection.connection
    cause = exc.__cause__
    out_of_step = isinstance(exc, db.InternalError) and isinstance(cause, psycopg.Error) and cause.sqlstate is None
    if out_of_step and raw is not None:
        if isinstance(raw, psycopg.AsyncConnection):
            raw.pgconn.finish()  # closed at once (close() is a coroutine): the pool throws it away
        else:
            raw.close()
    elif raw is None or not (raw.closed or raw.broken):
        return exc
    lost = db.OperationalError(f"the database connection broke: {exc}")
    lost.__cause__ = exc
    return lost


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    status, body, headers = error_answer(connection_lost(exc))
    return Response(body, status=status, headers=headers)


def error_answer(exc: Exception) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The status, body and extra headers that answer ``exc``, wherever it was raised.

    DRF views reach it through :func:`exception_handler`; the lean edge
    (``taskforge.http.lean``) calls it directly, so both answer alike.
    """
    if isinstance(exc, DomainError):
        return exc.status_code, error_body(exc.code, exc.message), {}
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = drf.PermissionDenied()
    for exc_type, (status, code) in _DRF_CODES.items():
        if isinstance(exc, exc_type):
            assert isinstance(exc, drf.APIException)
            if isinstance(exc, drf.ValidationError):
                fields = flatten_fields(exc.detail)
                return status, error_body(code, _validation_message(fields), fields), {}
            # A 401 must say how to authenticate (RFC 9110); DRF's own handler sets this too.
            auth_header = getattr(exc, "auth_header", None)
            return status, error_body(code, str(exc.detail)), {"WWW-Authenticate": auth_header} if auth_header else {}
    if isinstance(exc, drf.APIException):
        return exc.status_code, error_body(getattr(exc, "default_code", "error"), str(exc.detail)), {}
    if isinstance(exc, (db.OperationalError, db.InterfaceError)):
        # Postgres restarting, a connection cut, a statement or lock timeout:
        # the request can be repeated, so say so (clients retry 503, not 500).
        logger.warning("database unavailable: %s", exc, extra={"event": "db.unavailable"})
        return 503, error_body("unavailable", "the database is unavailable; retry shortly"), {"Retry-After": "1"}
    logger.exception("unhandled error", exc_info=exc)
    return 500, error_body("internal_error", "internal server error"), {}


# Plain Django handlers for errors raised outside DRF views.
def handler404(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("not_found", "not found"), status=404)


def handler500(request: HttpRequest) -> JsonResponse:
    return JsonResponse(error_body("internal_error", "internal server error"), status=500)


def handler400(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("validation_error", "bad request"), status=400)


def handler403(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("forbidden", "forbidden"), status=403)
