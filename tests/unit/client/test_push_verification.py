"""The client's push verification and its Django view decorator, against the server's own signer."""

from __future__ import annotations

import time

from django.http import HttpResponse, JsonResponse
from django.test import RequestFactory

from queues.push import signing
from taskforge_client.django_push import verified_push
from taskforge_client.push import verify_signature

BODY = b'{"user": "abc"}'


def signed_headers(secrets: list[str], *, timestamp: int | None = None, task_id: str = "t-1") -> dict[str, str]:
    at = int(time.time()) if timestamp is None else timestamp
    return {
        "TaskForge-Task-Id": task_id,
        "TaskForge-Timestamp": str(at),
        "TaskForge-Signature": signing.signature_header(secrets, at, task_id, BODY),
    }


def test_either_secret_of_a_rotation_verifies() -> None:
    headers = signed_headers(["new", "old"])
    assert verify_signature(headers, BODY, "new") and verify_signature(headers, BODY, ["old"])
    assert not verify_signature(headers, BODY, ["neither"])
    lowered = {k.lower(): v for k, v in headers.items()}
    assert verify_signature(lowered, BODY, "old"), "header names are case-insensitive"


def test_a_changed_task_id_timestamp_or_body_fails() -> None:
    headers = signed_headers(["s"])
    assert not verify_signature({**headers, "TaskForge-Task-Id": "t-2"}, BODY, "s")
    assert not verify_signature(
        {**headers, "TaskForge-Timestamp": str(int(headers["TaskForge-Timestamp"]) + 1)}, BODY, "s"
    )
    assert not verify_signature(headers, BODY + b" ", "s")


def test_an_old_delivery_is_a_replay_even_when_signed() -> None:
    old = signed_headers(["s"], timestamp=int(time.time()) - 301)
    assert not verify_signature(old, BODY, "s")
    assert verify_signature(old, BODY, "s", tolerance_seconds=600)


def _post(headers: dict[str, str]):  # type: ignore[no-untyped-def]
    meta = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}
    return RequestFactory().post("/hook", data=BODY, content_type="application/json", **meta)


def test_the_decorator_runs_the_view_only_for_authentic_recent_deliveries() -> None:
    calls: list[bytes] = []

    @verified_push(secrets=lambda: ["current", "previous"])
    def hook(request):  # type: ignore[no-untyped-def]
        calls.append(request.body)
        return JsonResponse({"sent": True})

    assert hook(_post(signed_headers(["previous"]))).status_code == 200
    assert calls == [BODY]
    refused: HttpResponse = hook(_post(signed_headers(["stranger"])))
    assert refused.status_code == 401
    assert hook(_post(signed_headers(["current"], timestamp=int(time.time()) - 400))).status_code == 401
    assert hook(RequestFactory().get("/hook")).status_code == 405
    assert calls == [BODY]
