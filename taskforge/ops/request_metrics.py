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

from workers.longpoll import attempt


def _repeated_attempt(request: HttpRequest) -> bool:
    return attempt(request) in ("again", "last")


def _not_for_the_client(response: HttpResponseBase) -> bool:
    return bool(getattr(response, "not_for_the_client", False))


class RequestMetricsBefore(PrometheusBeforeMiddleware):
    def process_request(self, request: HttpRequest) -> None:
        if _repeated_attempt(request):
            request.prometheus_before_middleware_event = Time()  # type: ignore[attr-defined]
            return
        super().process_request(request)

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if _not_for_the_client(response):
            return response
        return super().process_response(request, response)


class RequestMetricsAfter(PrometheusAfterMiddleware):
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
