"""A Django view decorator that accepts only authentic, recent push deliveries.

::

    from taskforge_client.django_push import verified_push

    @csrf_exempt
    @verified_push(secrets=lambda: [settings.TASKFORGE_PUSH_SECRET])
    def send_email(request):
        payload = json.loads(request.body)
        ...
        return JsonResponse({"sent": True})   # 2xx: the task is done, this object its result

A delivery whose signature does not match, or whose timestamp is more than five minutes old
(a replay), is answered 401 and never reaches the view; TaskForge counts that as a failed
attempt and retries it with the queue's backoff. Needs Django (``taskforge-client[django]``),
imported only when a view is decorated, so the package still imports without it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from taskforge_client.push import DEFAULT_TOLERANCE_SECONDS, signature_problem

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponse

View = Callable[..., "HttpResponse"]


def verified_push(
    secrets: str | Iterable[str] | Callable[[], str | Iterable[str]],
    *,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
) -> Callable[[View], View]:
    """``secrets``: the push secret(s) to accept, or a callable giving them per request (rotation)."""

    from django.http import JsonResponse

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method != "POST":
                return JsonResponse({"error": "push deliveries are POST requests"}, status=405)
            known = secrets() if callable(secrets) else secrets
            problem = signature_problem(dict(request.headers), request.body, known, tolerance_seconds=tolerance_seconds)
            if problem is not None:
                return JsonResponse({"error": problem}, status=401)
            return view(request, *args, **kwargs)

        return wrapped

    return decorate
