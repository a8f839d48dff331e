"""ASGI entry point: the API, the admin, /metrics and the dashboard's SSE stream."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "taskforge.settings")

# Django first: it sets up the apps that the consumer's imports need.
django_application = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

from dashboard.stream import StatsStreamConsumer  # noqa: E402
from taskforge.bodycap import BodyCapMiddleware  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": URLRouter(
            [
                # Session login only (the admin's): API keys are not accepted on the stream.
                re_path(r"^dashboard/stream/?$", AuthMiddlewareStack(StatsStreamConsumer.as_asgi())),
                # The body cap acts while the body streams in, before Django buffers it.
                re_path(r"", BodyCapMiddleware(django_application)),
            ]
        ),
    }
)
