"""django-prometheus' request metrics, counting a long poll once however many attempts it took.

A claim served by ``workers.longpoll.LongPoll`` runs as several requests
through Django: the first attempt counts as the request, and the attempt
that answers the client counts as its response; the attempts in between,
and answers the client never sees, are left out.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponseBase
from django_prometheus.middleware import PrometheusAfterMiddleware, PrometheusBeforeMiddleware
from django_prometheus.utils import Time

# The X-TaskForge-Attempt header the long poll sets on each attempt (workers.longpoll.ATTEMPT),
# read by name: the project package imports no app.
_ATTEMPT_META = "HTTP_X_TASKFORGE_ATTEMPT"


def _from_the_long_poll(request: HttpRequest) -> bool:
    """Whether the server itself made this request: an attempt of a long poll.

    Attempts run on the long poll's own handler (``workers.longpoll.AttemptHandler``),
    which gives each request its own URLconf before any middleware runs, and the
    long poll replaces a client's copy of the attempt header with its own. Any
    other request's attempt header came from the client.
    """
    return getattr(request, "urlconf", None) is not None


def _strip_a_clients_attempt_header(request: HttpRequest) -> None:
    # Only the server may mark a request as a repeated attempt: a client's header
    # would hide its requests from the request metrics (and fool the long poll).
    if not _from_the_long_poll(request):
        request.META.pop(_ATTEMPT_META, None)


def _repeated_attempt(request: HttpRequest) -> bool:
    return request.META.get(_ATTEMPT_META) in ("again", "last")


def _not_for_the_client(response: HttpResponseBase) -> bool:
    return bool(getattr(response, "not_for_the_client", False))


class RequestMetricsBefore(PrometheusBeforeMiddleware):
    """First in the chain: it also drops a client's attempt header before anything reads it."""

    def process_request(self, request: HttpRequest) -> None:
        _strip_a_clients_attempt_header(request)
        if _repeated_attempt(request):
            request.prometheus_before_middleware_event = Time()  # type: ignore[attr-defined]
            return
        super().process_request(request)

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if _not_for_the_client(response):
            return response
        return super().process_response(request, response)


class RequestMetricsAfter(PrometheusAfterMiddleware):
    # Every request looks up about ten labelled series; prometheus_client checks the
    # label names and takes a lock for each lookup. The series a label set names never
    # changes (nothing here removes one), so each is looked up once per process.
    _series: dict[tuple[int, tuple[tuple[str, Any], ...]], Any] = {}

    def label_metric(self, metric: Any, request: Any, response: Any = None, **labels: Any) -> Any:
        if not labels:
            return metric
        key = (id(metric), tuple(labels.items()))
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = metric.labels(**labels)
        return series

    def process_request(self, request: HttpRequest) -> None:
        if _repeated_attempt(request):
            request.prometheus_after_middleware_event = Time()  # type: ignore[attr-defined]
            return
        super().process_request(request)

    def process_view(self, request: HttpRequest, view_func: Any, *view_args: Any, **view_kwargs: Any) -> None:
        if not _repeated_attempt(request):
            super().process_view(request, view_func, *view_args, **view_kwargs)

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if _not_for_the_client(response):
            return response
        return super().process_response(request, response)


class _Answered:
    """What the two metrics middlewares read of a request and its response, for one served elsewhere."""

    def __init__(self, method: str, view_name: str | None, request_bytes: int, started: float, secure: bool) -> None:
        self.method = method
        self.secure = secure
        self.headers = {"content-length": str(request_bytes)}
        self.META: dict[str, str] = {}
        if view_name is not None:
            self.resolver_match = _Resolved(view_name)
        self.prometheus_before_middleware_event = started
        self.prometheus_after_middleware_event = started

    def is_secure(self) -> bool:
        return self.secure


class _Resolved:
    def __init__(self, view_name: str) -> None:
        self.view_name = view_name


class _Response:
    charset = "utf-8"
    streaming = False

    def __init__(self, status: int, content: bytes) -> None:
        self.status_code = status
        self.content = content


_before = RequestMetricsBefore(lambda request: HttpResponseBase())
_after = RequestMetricsAfter(lambda request: HttpResponseBase())


def record_request(
    method: str,
    view_name: str | None,
    status: int,
    request_bytes: int,
    content: bytes,
    started: float,
    *,
    secure: bool = False,
) -> None:
    """Count one request answered without Django's middleware (``taskforge.http.lean``).

    The same middleware methods record it, on the same series and labels, as
    if it had gone through them; ``started`` is its ``time.perf_counter()``.
    ``view_name`` None: refused before Django would have resolved its view
    (by ``BodyLimitMiddleware``), counted as Django counts those. ``secure``:
    whether Django would have seen it as HTTPS (the ``transport`` label).
    """
    request: Any = _Answered(method, view_name, request_bytes, started, secure)
    response: Any = _Response(status, content)
    _before.process_request(request)
    _after.process_request(request)
    request.prometheus_before_middleware_event = request.prometheus_after_middleware_event = started
    if view_name is not None:
        _after.process_view(request, None)
    _after.process_response(request, response)
    _before.process_response(request, response)
