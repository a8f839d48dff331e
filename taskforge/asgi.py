"""ASGI entry point: the API, the admin, /metrics and the dashboard's SSE stream."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "taskforge.settings")

application = get_asgi_application()
