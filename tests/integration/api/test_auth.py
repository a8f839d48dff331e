"""Authentication and roles: every endpoint x every kind of caller (API.md "Authentication").

401 without a valid key, 403 with the wrong role, success with the right role and
with admin; the checks come before any 404 or 405, and a refused call changes nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from rest_framework.test import APIClient

from queues.apikeys import create_key, revoke_key
from queues.models import ApiKey, Queue, Task
from tests.factories import QueueFactory, TaskFactory
from tests.integration.api.support import assert_error, counts

pytestmark = pytest.mark.django_db

ADMIN, PRODUCER, WORKER = "admin", "producer", "worker"


@dataclass
class World:
    pending: Task
    claimed: Task
    dead: Task


@pytest.fixture
def world(db) -> World:
    queue = QueueFactory(name="email_jobs")
    QueueFactory(name="empty_q")
    QueueFactory(name="push_q", push={"url": "https://example.com/hook", "timeout_seconds": 30,
                                      "max_concurrent": 10, "headers": {}}, push_secret="s" * 64)  # fmt: skip
    return World(
        pending=TaskFactory(queue=queue),
        claimed=TaskFactory(queue=queue, claimed=True, claimed_by="w-1"),
        dead=TaskFactory(queue=queue, dead=True),
    )


# (method, path, body, role, success status); {pending}/{claimed}/{dead}/{token} are filled from the world.
ENDPOINTS: list[tuple[str, str, Any, str, int]] = [
    ("POST", "/queues", {"name": "new_q"}, ADMIN, 201),
    ("GET", "/queues", None, PRODUCER, 200),
    ("GET", "/queues/email_jobs", None, PRODUCER, 200),
    ("PATCH", "/queues/email_jobs", {"paused": True}, ADMIN, 200),
    ("DELETE", "/queues/empty_q", None, ADMIN, 204),
    ("POST", "/queues/email_jobs/purge", None, ADMIN, 200),
    ("POST", "/queues/push_q/push-secret", None, ADMIN, 200),
    ("POST", "/queues/email_jobs/tasks", {"payload": {}}, PRODUCER, 201),
    ("POST", "/queues/email_jobs/tasks/batch", {"tasks": [{"payload": {}}]}, PRODUCER, 201),
    ("GET", "/queues/email_jobs/tasks", None, PRODUCER, 200),
    ("GET", "/queues/email_jobs/tasks/{pending}", None, PRODUCER, 200),
    ("GET", "/tasks/{pending}", None, PRODUCER, 200),
    ("DELETE", "/queues/email_jobs/tasks/{pending}", None, PRODUCER, 200),
    ("GET", "/queues/email_jobs/stats", None, PRODUCER, 200),
    ("POST", "/workers/claim", {"worker_id": "w-9", "queue": "email_jobs"}, WORKER, 200),
    ("POST", "/workers/heartbeat", {"worker_id": "w-1", "task_id": "{claimed}", "lease_token": "{token}"}, WORKER, 200),
    ("POST", "/workers/ack", {"worker_id": "w-1", "task_id": "{claimed}"}, WORKER, 200),
    ("POST", "/workers/nack", {"worker_id": "w-1", "task_id": "{claimed}", "error": "x"}, WORKER, 200),
    ("POST", "/workers/ack/batch", {"worker_id": "w-1", "items": [{"task_id": "{claimed}"}]}, WORKER, 200),
    (
        "POST",
        "/workers/nack/batch",
        {"worker_id": "w-1", "items": [{"task_id": "{claimed}", "error": "x"}]},
        WORKER,
        200,
    ),
    ("GET", "/workers", None, ADMIN, 200),
    ("GET", "/queues/email_jobs/dlq", None, ADMIN, 200),
    ("POST", "/queues/email_jobs/dlq/{dead}/replay", None, ADMIN, 200),
    ("POST", "/queues/email_jobs/dlq/replay", {"all": True}, ADMIN, 200),
    ("DELETE", "/queues/email_jobs/dlq/{dead}", None, ADMIN, 204),
]

CALLERS = ["none", "revoked", ADMIN, PRODUCER, WORKER]
# Other ways to hold no valid key, checked on one endpoint of each role (see below).
BAD_CREDENTIALS = ["unknown", "not_bearer", "empty_bearer"]


def fill(value: Any, world: World) -> Any:
    if isinstance(value, str):
        return (
            value.replace("{pending}", str(world.pending.id))
            .replace("{claimed}", str(world.claimed.id))
            .replace("{dead}", str(world.dead.id))
            .replace("{token}", world.claimed.lease_token)
        )
    if isinstance(value, dict):
        return {k: fill(v, world) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, world) for v in value]
    return value


def client_as(caller: str) -> APIClient:
    client = APIClient()
    if caller == "none":
        return client
    if caller == "revoked":
        _, raw = create_key("revoked-admin", ADMIN)
        assert revoke_key("revoked-admin")
        header = f"Bearer {raw}"
    elif caller == "unknown":
        header = "Bearer tf_" + uuid.uuid4().hex * 2
    elif caller == "not_bearer":
        _, raw = create_key("basic", ADMIN)
        header = f"Basic {raw}"
    elif caller == "empty_bearer":
        header = "Bearer "
    else:
        _, raw = create_key(f"{caller}-key", caller)
        header = f"Bearer {raw}"
    client.credentials(HTTP_AUTHORIZATION=header)
    return client


def call(client: APIClient, method: str, path: str, body: Any):
    if body is None:
        return client.generic(method, path)
    return client.generic(method, path, orjson.dumps(body), content_type="application/json")


def snapshot() -> tuple:
    tasks = sorted(Task.objects.values_list("id", "status", "updated_at"))
    return counts(), tasks, list(Queue.objects.order_by("name").values_list("name", "paused"))


def expected_for(caller: str, role: str, success: int) -> tuple[int, str | None]:
    if caller in (ADMIN, role):
        return success, None
    if caller in (PRODUCER, WORKER, ADMIN):
        return 403, "forbidden"
    return 401, "unauthorized"


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize(
    ("method", "path", "body", "role", "success"), ENDPOINTS, ids=[f"{m} {p}" for m, p, *_ in ENDPOINTS]
)
def test_role_matrix(world, caller, method, path, body, role, success):
    client = client_as(caller)
    before = snapshot()
    response = call(client, method, fill(path, world), fill(body, world))
    status, code = expected_for(caller, role, success)
    if code is None:
        assert response.status_code == status, response.content
        return
    assert_error(response, status, code)
    if status == 401:
        assert response.headers.get("WWW-Authenticate", "").startswith("Bearer")
    assert snapshot() == before


@pytest.mark.parametrize(
    ("method", "path", "body", "role", "success"), ENDPOINTS, ids=[f"{m} {p}" for m, p, *_ in ENDPOINTS]
)
def test_trailing_slash_is_answered_directly(world, method, path, body, role, success):
    response = call(client_as(role), method, fill(path, world) + "/", fill(body, world))
    assert response.status_code == success, response.content  # never a redirect


@pytest.mark.parametrize("caller", BAD_CREDENTIALS)
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/queues", None),
        ("POST", "/workers/claim", {"worker_id": "w"}),
        ("GET", "/workers", None),
    ],
)
def test_invalid_credentials_are_401(world, caller, method, path, body):
    before = snapshot()
    assert_error(call(client_as(caller), method, path, body), 401, "unauthorized")
    assert snapshot() == before


# --- order: 401, then 403, then 404 / 405 -----------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "role"),
    [
        ("GET", "/queues/nope", PRODUCER),
        ("GET", "/queues/nope/tasks/not-a-uuid", PRODUCER),
        ("DELETE", "/queues/nope", ADMIN),
        ("POST", "/queues/nope/purge", ADMIN),
        ("POST", "/queues/nope/push-secret", ADMIN),
        ("GET", "/queues/nope/dlq", ADMIN),
        ("POST", "/queues/nope/dlq/xyz/replay", ADMIN),
        ("DELETE", "/queues/nope/dlq/xyz", ADMIN),
        ("GET", "/queues/nope/stats", PRODUCER),
        ("GET", "/tasks/not-a-uuid", PRODUCER),
        ("GET", "/tasks/00000000-0000-0000-0000-000000000000", PRODUCER),
    ],
)
def test_auth_comes_before_404(world, method, path, role):
    assert_error(call(client_as("none"), method, path, None), 401, "unauthorized")
    wrong = WORKER if role != WORKER else PRODUCER
    assert_error(call(client_as(wrong), method, path, None), 403, "forbidden")
    assert_error(call(client_as(role), method, path, None), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/queues"),
        ("DELETE", "/queues"),
        ("PUT", "/queues/email_jobs"),
        ("POST", "/queues/email_jobs/stats"),
        ("GET", "/workers/claim"),
        ("GET", "/queues/email_jobs/purge"),
        ("PATCH", "/queues/email_jobs/tasks"),
        ("GET", "/queues/email_jobs/dlq/replay"),
        ("DELETE", "/workers"),
    ],
)
def test_auth_comes_before_405(world, method, path):
    assert_error(call(client_as("none"), method, path, None), 401, "unauthorized")
    assert_error(call(client_as("revoked"), method, path, None), 401, "unauthorized")
    before = snapshot()
    error = assert_error(call(client_as(ADMIN), method, path, None), 405, "method_not_allowed")
    assert method in error["message"]
    assert snapshot() == before


@pytest.mark.parametrize("path", ["/nope", "/api/v1/queues", "/queues/email_jobs/tasks/x/y", "/workers/claim/x"])
def test_unknown_paths_are_401_then_404(world, path):
    assert_error(call(client_as("none"), "GET", path, None), 401, "unauthorized")
    assert_error(call(client_as(PRODUCER), "GET", path, None), 404, "not_found")
    assert_error(call(client_as(WORKER), "POST", path, {"a": 1}), 404, "not_found")


# --- keys -----------------------------------------------------------------------------------------


def test_revoked_key_stops_working_at_once(world):
    _, raw = create_key("soon-revoked", PRODUCER)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/queues").status_code == 200
    assert revoke_key("soon-revoked")
    assert_error(client.get("/queues"), 401, "unauthorized")


def test_scheme_is_case_insensitive_and_whitespace_tolerant(world):
    _, raw = create_key("casing", PRODUCER)
    for header in (f"bearer {raw}", f"BEARER {raw}", f"Bearer   {raw}  "):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=header)
        assert client.get("/queues").status_code == 200, header


def test_a_key_is_stored_only_as_a_hash(world):
    key, raw = create_key("hashed", PRODUCER)
    stored = ApiKey.objects.get(pk=key.pk)
    assert raw not in (stored.key_hash, stored.prefix, stored.name)
    assert len(stored.key_hash) == 64
    assert raw.startswith(stored.prefix)


def test_a_key_prefix_alone_is_not_a_key(world):
    _, raw = create_key("prefixed", ADMIN)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw[:-1]}")
    assert_error(client.get("/queues"), 401, "unauthorized")


# --- the open endpoints ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/healthz", "/healthz/", "/readyz", "/metrics", "/api/schema", "/api/docs"])
def test_open_endpoints_need_no_key(world, path):
    assert APIClient().get(path).status_code == 200


def test_metrics_token(world, settings):
    settings.TASKFORGE_METRICS_TOKEN = "m" * 32
    assert APIClient().get("/metrics").status_code == 401
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer " + "x" * 32)
    assert wrong.get("/metrics").status_code == 401
    right = APIClient()
    right.credentials(HTTP_AUTHORIZATION="Bearer " + "m" * 32)
    assert right.get("/metrics").status_code == 200


def test_the_schema_still_negotiates_its_format(world):
    as_json = APIClient().get("/api/schema?format=json")
    assert as_json.status_code == 200
    assert as_json.json()["openapi"].startswith("3.")
    as_yaml = APIClient().get("/api/schema")
    assert as_yaml.status_code == 200
    assert b"openapi: 3." in as_yaml.content
