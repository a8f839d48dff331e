"""Small helpers shared by the API contract tests (tests/integration/api/test_*.py)."""

from __future__ import annotations

from typing import Any

from queues.models import DeadLetterTask, Queue, Task, TaskEvent

ERROR_CODES = {
    400: {"validation_error"},
    401: {"unauthorized"},
    403: {"forbidden"},
    404: {"not_found"},
    405: {"method_not_allowed"},
    409: {"conflict", "lease_lost"},
    413: {"payload_too_large"},
    415: {"unsupported_media_type"},
    503: {"unavailable"},
    500: {"internal_error"},
}


def assert_error(response: Any, status: int, code: str | None = None, *, fields: list[str] | None = None) -> dict:
    """The contract's error shape: ``{"error": {"code", "message", ["fields"]}}``."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error.get("message"), str) and error["message"], error
    assert error["code"] in ERROR_CODES[status], error
    if code is not None:
        assert error["code"] == code, error
    if error["code"] == "validation_error":
        assert set(error) <= {"code", "message", "fields"}, error
    else:
        assert set(error) == {"code", "message"}, error
    if fields is not None:
        assert sorted(error.get("fields", {})) == sorted(fields), error
    return error


def counts() -> dict[str, int]:
    """Rows of everything a request could store: compared before and after bad input."""
    return {
        "queues": Queue.objects.count(),
        "tasks": Task.objects.count(),
        "events": TaskEvent.objects.count(),
        "dead_letters": DeadLetterTask.objects.count(),
    }


def enqueue(client: Any, queue_name: str = "email_jobs", **body: Any) -> dict:
    body.setdefault("payload", {"user_id": "abc123"})
    response = client.post(f"/queues/{queue_name}/tasks", body, format="json")
    assert response.status_code in (200, 201), response.content
    return response.json()


def claim(client: Any, worker_id: str = "w-1", **body: Any) -> list[dict]:
    response = client.post("/workers/claim", {"worker_id": worker_id, **body}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["tasks"]


def post(client: Any, path: str, body: Any) -> Any:
    return client.post(path, body, format="json")
