"""django-prometheus' request metrics, counting a long poll once however many attempts it took.

A claim served by ``workers.longpoll.LongPoll`` runs as several requests
through Django: the first attempt counts as the request, and the attempt
that answers the client counts as its response; the attempts in between,
and answers the client never sees, are left out.

A request the lean edge answers (``taskforge.http.lean``) is counted by
:func:`record_request` on the same series. Every series' writes to the
shared files are batched (``taskforge.ops.metric_batches``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from django_prometheus.middleware import PrometheusAfterMiddleware, PrometheusBeforeMiddleware
from django_prometheus.utils import Time

from taskforge.ops.metric_batches import defer_writes, settle

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
    """First in the chain: it also drops a client's attempt header before anything reads it.

    Last to move a request's metrics, so it settles their batch (``taskforge.ops.metric_batches``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for metric in (
            self.metrics.requests_total,
            self.metrics.responses_total,
            self.metrics.requests_latency_before,
            self.metrics.requests_unknown_latency_before,
        ):
            defer_writes(metric)

    def process_request(self, request: HttpRequest) -> None:
        _strip_a_clients_attempt_header(request)
        if _repeated_attempt(request):
            request.prometheus_before_middleware_event = Time()  # type: ignore[attr-defined]
            return
        super().process_request(request)

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if _not_for_the_client(response):
            return response
        super().process_response(request, response)
        settle()
        return response


class RequestMetricsAfter(PrometheusAfterMiddleware):
    # Every request looks up about ten labelled series; prometheus_client checks the
    # label names and takes a lock for each lookup. The series a label set names never
    # changes (nothing here removes one), so each is looked up once per process, and
    # its writes to the shared files are batched (taskforge.ops.metric_batches).
    _series: dict[tuple[int, tuple[tuple[str, Any], ...]], Any] = {}

    def label_metric(self, metric: Any, request: Any, response: Any = None, **labels: Any) -> Any:
        key = (id(metric), tuple(labels.items()))
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = defer_writes(metric.labels(**labels) if labels else metric)
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


class _Sent:
    """What the middleware's own label rules read of a request: its method and whether it came over HTTPS."""

    def __init__(self, method: str, secure: bool) -> None:
        self.method = method
        self.secure = secure

    def is_secure(self) -> bool:
        return self.secure


@dataclass(frozen=True)
class _RequestSeries:
    """The series one kind of request moves: by method, view, status and transport."""

    counters: tuple[Any, ...]  # each moved by one
    latencies: tuple[Any, ...]  # each observes the request's time
    body_sizes: tuple[Any, Any] | None  # observe the request's and the answer's body lengths


def _series_of(method: str, view_name: str | None, status: int, secure: bool, ajax: bool) -> _RequestSeries:
    """The series the two middlewares move for such a request, as their methods (above) choose them."""
    metrics, series = _before.metrics, _after.label_metric
    before = (series(metrics.requests_total, None), series(metrics.responses_total, None))
    latency_before = series(metrics.requests_latency_before, None)
    if view_name is None:
        # Refused by BodyLimitMiddleware, which Django runs between the two: only the first counts it.
        return _RequestSeries(counters=before, latencies=(latency_before,), body_sizes=None)
    sent: Any = _Sent(method, secure)
    known_method, transport = _after._method(sent), _after._transport(sent)
    view = view_name or "<unnamed view>"
    after = [
        series(metrics.requests_by_method, None, method=known_method),
        series(metrics.requests_by_transport, None, transport=transport),
        series(metrics.requests_by_view_transport_method, None, view=view, transport=transport, method=known_method),
        # A DRF Response is a template response with no template: process_template_response counts it.
        series(metrics.responses_by_templatename, None, templatename="None"),
        series(metrics.responses_by_status, None, status=str(status)),
        series(metrics.responses_by_status_view_method, None, status=str(status), view=view, method=known_method),
        series(metrics.responses_by_charset, None, charset="utf-8"),
    ]
    if ajax:
        after.append(series(metrics.requests_ajax, None))
    return _RequestSeries(
        counters=(*before, *after),
        # django-prometheus labels this latency with the method as sent
        latencies=(latency_before, series(metrics.requests_latency_by_view_method, None, view=view, method=method)),
        body_sizes=(series(metrics.requests_body_bytes, None), series(metrics.responses_body_bytes, None)),
    )


_before = RequestMetricsBefore(lambda request: HttpResponseBase())
_after = RequestMetricsAfter(lambda request: HttpResponseBase())
_request_series: dict[tuple[str, str | None, int, bool, bool], _RequestSeries] = {}


def record_request(
    method: str,
    view_name: str | None,
    status: int,
    request_bytes: int,
    content: bytes,
    started: float,
    *,
    secure: bool = False,
    ajax: bool = False,
) -> None:
    """Count one request answered without Django's middleware (``taskforge.http.lean``).

    It moves the series the two middlewares would have moved, with the same
    labels and observations (``tests/integration/observability/test_request_metrics.py``
    compares every family both ways); ``started`` is its ``time.perf_counter()``.
    ``view_name`` None: refused where Django's ``BodyLimitMiddleware`` refuses,
    so counted by the first middleware only, as Django counts those.
    ``secure``: whether Django would have seen it as HTTPS (the ``transport``
    label). ``ajax``: sent with ``X-Requested-With: XMLHttpRequest``.

    Through the middleware methods themselves one request's metrics took
    about 80 µs of CPU in an API process (``make bench-phases``); here the
    series of each kind of request are looked up once, and a request only
    moves them.
    """
    key = (method, view_name, status, secure, ajax)
    series = _request_series.get(key)
    if series is None:
        series = _request_series[key] = _series_of(*key)
    for counter in series.counters:
        counter.inc()
    if series.body_sizes is not None:
        series.body_sizes[0].observe(request_bytes)
        series.body_sizes[1].observe(len(content))
    latency = time.perf_counter() - started
    for histogram in series.latencies:
        histogram.observe(latency)
    settle()
