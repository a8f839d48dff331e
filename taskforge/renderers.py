"""JSON rendering with orjson: UUIDs and aware datetimes natively, and fast."""

from __future__ import annotations

from typing import Any

import orjson
from rest_framework.renderers import BaseRenderer


class FastJSONRenderer(BaseRenderer):
    media_type = "application/json"
    format = "json"
    charset = None  # JSON is UTF-8 by definition (RFC 8259)

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        if data is None:
            return b""
        return orjson.dumps(data, option=orjson.OPT_UTC_Z, default=str)
