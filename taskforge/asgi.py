"""ASGI entry point: the API, the admin, /metrics and the dashboard's SSE stream.

One server, two ways of running Django, chosen by path:

* the requests that wait (a long poll on ``/workers/claim`` that finds no
  task, and the SSE stream) go through Django's ASGI handler, so a waiting
  request holds no thread and no database connection (a claim is tried on the
  thread pool first: see ``workers.longpoll.ThreadedFirst``);
* everything else (enqueue, ack, heartbeat, the admin, ...) goes to Django's
  WSGI handler on a fixed pool of threads (``a2wsgi``). Django's ASGI handler
  starts a new executor thread for every sync request; measured with
  ``make bench``, that bridge alone cost about 40% of the API's CPU per
  single enqueue, and the thread pool serves the same views for the cost of
  a plain threaded WSGI server.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "taskforge.settings")

# Django first: it sets up the apps that the consumer's imports need.
django_asgi = get_asgi_application()

from a2wsgi import WSGIMiddleware  # noqa: E402
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.urls import re_path  # noqa: E402

from dashboard.stream import StatsStreamConsumer  # noqa: E402
from taskforge.bodycap import BodyCapMiddleware  # noqa: E402
from workers.longpoll import AttemptHandler, ThreadedFirst  # noqa: E402

django_threaded = WSGIMiddleware(get_wsgi_application(), workers=settings.TASKFORGE_THREADS)
claim_attempts = WSGIMiddleware(AttemptHandler("workers.attempt_urls"))
claim_attempts.executor = django_threaded.executor  # one pool of threads for both

application = ProtocolTypeRouter(
    {
        "http": URLRouter(
            [
                # Session login only (the admin's): API keys are not accepted on the stream.
                re_path(r"^dashboard/stream/?$", AuthMiddlewareStack(StatsStreamConsumer.as_asgi())),
                # The body cap acts while the body streams in, before Django buffers it.
                re_path(r"^workers/claim/?$", BodyCapMiddleware(ThreadedFirst(claim_attempts, django_asgi))),
                re_path(r"", BodyCapMiddleware(django_threaded)),
            ]
        ),
    }
)
