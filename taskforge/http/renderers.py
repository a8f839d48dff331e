"""JSON rendering with orjson: UUIDs and aware datetimes natively, and fast."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request


class FastJSONRenderer(BaseRenderer):
    media_type = "application/json"
    format = "json"
    charset = None  # JSON is UTF-8 by definition (RFC 8259)

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        if data is None:
            return b""
        return orjson.dumps(data, option=orjson.OPT_UTC_Z, default=str)


class JSONNegotiation(DefaultContentNegotiation):
    """The API speaks JSON whatever the client asks for.

    DRF's own negotiation answers ``Accept: text/html`` with a 406 (before the
    401 the contract promises) and ``?format=xml`` with a 404. A view with one
    renderer (every API view) always uses it; views offering several (the
    OpenAPI schema: YAML or JSON) still negotiate.
    """

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> Any:
        offered = list(renderers)  # DRF passes a list; the signature is its base class's
        if len(offered) == 1:
            return offered[0], offered[0].media_type
        return super().select_renderer(request, offered, format_suffix)
