"""ASGI entry point: the API, the admin, /metrics and the dashboard's SSE stream.

Every request is served by Django's WSGI handler on a fixed pool of threads
(``a2wsgi``), except the single-task calls of producers and workers, which the
lean edge (``taskforge.http.lean``) serves with the views' own functions on the
same threads, without Django's request, middleware and DRF machinery (a
single enqueue, when it can, on the event loop itself: ``queues.api.hot``).
Django's own ASGI handler starts a new executor thread for every
synchronous request: measured with ``make bench``, that bridge alone cost
about 40% of the API's CPU per single enqueue. What waits does so on the event
loop, holding no thread and no database connection: a claim that finds no
task, or a read of a task waiting for its result (``wait_seconds``), waits
between attempts (``workers.longpoll.LongPoll``), and the SSE stream is a
Channels consumer.
"""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "taskforge.settings")

# Django first: it sets up the apps that the consumer's imports need.
django.setup(set_prefix=False)

from a2wsgi import WSGIMiddleware  # noqa: E402
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.urls import re_path  # noqa: E402

from dashboard.stream import StatsStreamConsumer  # noqa: E402
from queues.api import hot as queue_calls  # noqa: E402
from taskforge.http.bodycap import BodyCapMiddleware  # noqa: E402
from taskforge.http.lean import LeanEdge  # noqa: E402
from workers import hot as worker_calls  # noqa: E402
from workers.longpoll import AttemptHandler, LongPoll  # noqa: E402

# The ignored arg-type errors below are where three typings of the same protocols
# meet, not mistakes: django-stubs types a WSGI handler as returning the response
# (which is the iterable of bytes WSGI asks for), a2wsgi types ASGI scopes and
# messages as TypedDicts where ours are plain mappings, and django-stubs types
# re_path() for views where Channels' URLRouter takes ASGI applications.
django_threaded = WSGIMiddleware(get_wsgi_application(), workers=settings.TASKFORGE_THREADS)  # type: ignore[arg-type]
poll_attempts = WSGIMiddleware(AttemptHandler("workers.attempt_urls"))  # type: ignore[arg-type]
poll_attempts.executor = django_threaded.executor  # one pool of threads for both
long_polls = BodyCapMiddleware(LongPoll(poll_attempts))  # type: ignore[arg-type]

through_django = URLRouter(
    [
        # Session login only (the admin's): API keys are not accepted on the stream.
        re_path(r"^dashboard/stream/?$", AuthMiddlewareStack(StatsStreamConsumer.as_asgi())),
        # The body cap acts while the body streams in, before Django buffers it.
        re_path(r"^workers/claim/?$", long_polls),  # type: ignore[arg-type]
        # One task by id, in a queue or not (not the batch enqueue): a read may wait for the result.
        re_path(r"^(?:queues/[^/]+/)?tasks/(?!batch/?$)[^/]+/?$", long_polls),  # type: ignore[arg-type]
        re_path(r"", BodyCapMiddleware(django_threaded)),  # type: ignore[arg-type]
    ]
)
# The single-task calls (enqueue, task reads, claim, heartbeat, ack, nack) skip Django's
# request machinery: the same view functions, on the same threads (or, for an enqueue, the loop).
lean_edge = LeanEdge(
    [*queue_calls.routes(), *worker_calls.routes()],
    django=through_django,
    executor=django_threaded.executor,
)
application = ProtocolTypeRouter({"http": lean_edge})
