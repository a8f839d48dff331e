"""/api/schema is valid OpenAPI 3, covers the whole contract, and tells the truth.

The contract's endpoint list is written out here (it is the API.md tables);
real responses of a full task life are validated against the schema; the
roles it documents are the ones the views declare (and the role check reads).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from drf_spectacular.generators import EndpointEnumerator
from openapi_schema_validator import OAS30Validator, oas30_format_checker
from openapi_spec_validator import validate as validate_spec

from queues.api import outputs
from queues.api.openapi_components import ERROR_CODES
from queues.apikeys import HasRole
from queues.models import ApiKey, DeadLetterTask, Queue, Schedule, Status
from tests.contract import SCHEDULE_FIELDS
from tests.factories import QueueFactory, TaskFactory

# Every endpoint of the HTTP contract, with its methods.
CONTRACT: dict[str, set[str]] = {
    "/queues": {"get", "post"},
    "/queues/{name}": {"get", "patch", "delete"},
    "/queues/{name}/purge": {"post"},
    "/queues/{name}/push-secret": {"post"},
    "/queues/{name}/tasks": {"get", "post"},
    "/queues/{name}/tasks/batch": {"post"},
    "/queues/{name}/tasks/{id}": {"get", "delete"},
    "/tasks/{id}": {"get"},
    "/queues/{name}/stats": {"get"},
    "/queues/{name}/dlq": {"get"},
    "/queues/{name}/dlq/{id}/replay": {"post"},
    "/queues/{name}/dlq/replay": {"post"},
    "/queues/{name}/dlq/{id}": {"delete"},
    "/schedules": {"get", "post"},
    "/schedules/{name}": {"get", "patch", "delete"},
    "/schedules/{name}/trigger": {"post"},
    "/workers": {"get"},
    "/workers/claim": {"post"},
    "/workers/heartbeat": {"post"},
    "/workers/ack": {"post"},
    "/workers/ack/batch": {"post"},
    "/workers/nack": {"post"},
    "/workers/nack/batch": {"post"},
    # TaskForge's additions, documented in docs/api.md
    "/workers/{worker_id}/{action}": {"post"},
    "/queues/{name}/history": {"get"},
    "/healthz": {"get"},
    "/readyz": {"get"},
    "/metrics": {"get"},
    "/dashboard/stream": {"get"},
}
OPEN = {"/healthz", "/readyz", "/metrics", "/dashboard/stream"}
HTTP_METHODS = {"get", "post", "put", "patch", "delete", "head", "options", "trace"}
# The contract's role table (API.md); the views' declarations must agree with it.
CONTRACT_ROLES: dict[tuple[str, str], str] = {
    ("/queues", "post"): "admin",
    ("/queues", "get"): "producer",
    ("/queues/{}", "get"): "producer",
    ("/queues/{}", "patch"): "admin",
    ("/queues/{}", "delete"): "admin",
    ("/queues/{}/purge", "post"): "admin",
    ("/queues/{}/push-secret", "post"): "admin",
    ("/queues/{}/tasks", "post"): "producer",
    ("/queues/{}/tasks/batch", "post"): "producer",
    ("/queues/{}/tasks", "get"): "producer",
    ("/queues/{}/tasks/{}", "get"): "producer",
    ("/queues/{}/tasks/{}", "delete"): "producer",
    ("/tasks/{}", "get"): "producer",
    ("/queues/{}/stats", "get"): "producer",
    ("/queues/{}/dlq", "get"): "admin",
    ("/queues/{}/dlq/{}/replay", "post"): "admin",
    ("/queues/{}/dlq/replay", "post"): "admin",
    ("/queues/{}/dlq/{}", "delete"): "admin",
    ("/schedules", "post"): "admin",
    ("/schedules", "get"): "admin",
    ("/schedules/{}", "get"): "admin",
    ("/schedules/{}", "patch"): "admin",
    ("/schedules/{}", "delete"): "admin",
    ("/schedules/{}/trigger", "post"): "admin",
    ("/workers", "get"): "admin",
    ("/workers/claim", "post"): "worker",
    ("/workers/heartbeat", "post"): "worker",
    ("/workers/ack", "post"): "worker",
    ("/workers/ack/batch", "post"): "worker",
    ("/workers/nack", "post"): "worker",
    ("/workers/nack/batch", "post"): "worker",
    ("/workers/{}/{}", "post"): "admin",
    ("/queues/{}/history", "get"): "producer",
}


def _schema_ref(response: dict[str, Any]) -> str | None:
    return response.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path)


def _api_views() -> dict[str, type]:
    """Every DRF view of the apps' API (not the schema's own views), by its path as the document writes it."""
    return {
        path.rstrip("/"): callback.cls
        for path, _, _, callback in EndpointEnumerator().get_api_endpoints()
        if callback.cls.__module__.partition(".")[0] in {"queues", "workers"}
    }


@pytest.fixture(scope="module")
def document(django_db_blocker) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    with django_db_blocker.unblock():
        response = Client().get("/api/schema", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return json.loads(response.content)


def test_schema_is_valid_openapi_3(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.")
    validate_spec(document)


def test_schema_lists_every_endpoint_of_the_contract_and_nothing_else(document: dict[str, Any]) -> None:
    documented = {
        _shape(path): {method for method in item if method in HTTP_METHODS} for path, item in document["paths"].items()
    }
    assert documented == {_shape(path): methods for path, methods in CONTRACT.items()}


def test_bearer_scheme_on_every_keyed_endpoint(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearerAuth"]["type"] == "http" and schemes["bearerAuth"]["scheme"] == "bearer"
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            if path in OPEN:
                assert {"bearerAuth": []} not in operation["security"], (path, method)
                continue
            assert operation["security"] == [{"bearerAuth": []}], (path, method)
            for status in ("401", "403"):
                assert _schema_ref(operation["responses"][status]) == "#/components/schemas/Error", (path, method)
            assert "Role: `" in operation["description"], (path, method)


def test_every_view_declares_a_valid_role_for_each_method_it_serves() -> None:
    views = _api_views()
    assert {_shape(path) for path in views} == {_shape(path) for path in CONTRACT if path not in OPEN}
    for path, view_class in views.items():
        served = {m.upper() for m in view_class.http_method_names if m not in {"head", "options"}}
        served = {m for m in served if hasattr(view_class, m.lower())}
        assert set(view_class.roles) == served, (path, view_class)
        assert set(view_class.roles.values()) <= set(ApiKey.Role.values), (path, view_class)


def test_declared_roles_are_the_contracts() -> None:
    declared = {
        (_shape(path), method.lower()): str(role)
        for path, view_class in _api_views().items()
        for method, role in view_class.roles.items()
    }
    assert declared == CONTRACT_ROLES


def test_documented_role_of_every_operation_is_the_views_declared_role(document: dict[str, Any]) -> None:
    views = _api_views()
    documented_operations = 0
    for path, item in document["paths"].items():
        if path in OPEN:
            continue
        view_class = views[path]
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            documented = re.findall(r"Role: `(\w+)`", operation["description"])
            assert documented == [str(view_class.roles[method.upper()])], (path, method)
            assert operation["description"].endswith(HasRole.openapi_description(view_class, method.upper())), (
                path,
                method,
            )
            documented_operations += 1
    assert documented_operations == sum(len(view_class.roles) for view_class in views.values())


def test_response_shapes_have_the_fields_the_views_render(document: dict[str, Any]) -> None:
    """The shapes are written apart from ``queues.api.outputs``: they must name the same fields."""
    schemas = document["components"]["schemas"]
    task = {"queue", *outputs.TASK_FIELDS}
    assert set(schemas["Task"]["properties"]) == task
    assert set(schemas["ClaimedTask"]["properties"]) == task | {"lease_token", "lease_expires_at"}
    assert set(schemas["TaskWithHistory"]["properties"]) == task | {"history"}
    assert set(schemas["Queue"]["properties"]) == set(outputs.queue(Queue(name="q")))
    event = dict.fromkeys(("at", "from_status", "to_status", "worker_id", "detail"))
    assert set(schemas["HistoryEntry"]["properties"]) == set(outputs.history_entry(event))
    entry = DeadLetterTask(task_id=uuid.uuid4(), payload={}, attempts=1, died_at=None)
    assert set(schemas["DeadLetter"]["properties"]) == set(outputs.dead_letter(entry, "q"))
    schedule = Schedule(name="s", queue=Queue(name="q"), every_seconds=60)
    assert set(schemas["Schedule"]["properties"]) == set(outputs.schedule(schedule)) == set(SCHEDULE_FIELDS)


def test_every_operation_has_its_bodies_and_errors(document: dict[str, Any]) -> None:
    for path, item in document["paths"].items():
        if path in OPEN:
            continue
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            responses = operation["responses"]
            success = [status for status in responses if status.startswith("2")]
            assert success, (path, method)
            for status in success:
                if status != "204":
                    assert _schema_ref(responses[status]), (path, method, status)
            if "requestBody" in operation:
                assert {"400", "413", "415"} <= set(responses), (path, method)
                body = operation["requestBody"]["content"]["application/json"]["schema"]
                assert body["$ref"].startswith("#/components/schemas/")
            if "{name}" in path or "{task_id}" in path:
                assert "404" in responses, (path, method)


def test_error_shape_is_described_once(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    error = schemas["Error"]
    assert error["required"] == ["error"]
    detail = schemas[error["properties"]["error"]["$ref"].rsplit("/", 1)[-1]]
    assert set(detail["properties"]) == {"code", "message", "fields"}
    assert set(detail["required"]) == {"code", "message"}
    codes = schemas[detail["properties"]["code"]["$ref"].rsplit("/", 1)[-1]]["enum"]
    assert set(codes) == set(ERROR_CODES)
    assert set(schemas["TaskStatusEnum"]["enum"]) == set(Status.values)


def test_request_bodies_refuse_unknown_fields(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    enqueue = schemas["EnqueueRequest"]
    assert enqueue["additionalProperties"] is False
    assert enqueue["required"] == ["payload"]
    assert enqueue["properties"]["priority"]["minimum"] == 1
    assert enqueue["properties"]["priority"]["maximum"] == 10
    assert enqueue["properties"]["payload"]["type"] == "object"


def test_schema_and_docs_need_no_key() -> None:
    for path in ("/api/schema", "/api/docs"):
        assert Client().get(path).status_code == 200
        assert Client().get(path, HTTP_AUTHORIZATION="Bearer not-a-key").status_code == 200


def test_docs_are_served_from_our_own_static_files() -> None:
    response = Client().get("/api/docs")
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any(asset.endswith("swagger-ui-bundle.js") for asset in assets)
    assert all(asset.startswith("/static/") for asset in assets), assets
    assert "cdn" not in html.lower()
    for asset in assets:
        assert finders.find(asset.removeprefix("/static/")), f"{asset} is not in any static directory"
    assert 'url: "/api/schema"' in html


# --- real responses against the schema -------------------------------------------------------


class Checker:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.paths = [(re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", p) + "$"), p) for p in document["paths"]]
        self.checked: set[tuple[str, str, int]] = set()

    def __call__(self, response: Any, method: str, path: str, body: Any = None) -> Any:
        template = next(t for pattern, t in self.paths if pattern.match(path.split("?")[0]))
        operation = self.document["paths"][template][method]
        if body is not None:
            self._validate(body, operation["requestBody"]["content"]["application/json"]["schema"])
        spec = operation["responses"].get(str(response.status_code))
        assert spec is not None, f"{method.upper()} {template} answered an undocumented {response.status_code}"
        if "content" in spec:
            self._validate(response.json(), spec["content"]["application/json"]["schema"])
        else:
            assert not response.content
        self.checked.add((template, method, response.status_code))
        return response.json() if response.content else None

    def _validate(self, instance: Any, schema: dict[str, Any]) -> None:
        root = {**schema, "components": self.document["components"]}
        OAS30Validator(root, format_checker=oas30_format_checker).validate(instance)


@pytest.mark.django_db
def test_real_responses_match_the_schema(document, admin_api, worker) -> None:  # type: ignore[no-untyped-def]
    check = Checker(document)

    def call(client, method: str, path: str, body: Any = None, *, bad: bool = False) -> Any:  # type: ignore[no-untyped-def]
        kwargs = {"data": body, "format": "json"} if body is not None else {}
        response = getattr(client, method)(path, **kwargs)
        return check(response, method, path, None if bad else body)

    call(admin_api, "post", "/queues", {"name": "mail", "max_retries": 1, "rate_limit": None})
    call(admin_api, "get", "/queues")
    call(admin_api, "get", "/queues/mail")
    call(admin_api, "patch", "/queues/mail", {"paused": False})
    enqueue = {"payload": {"to": "a@example.com"}, "priority": 2, "idempotency_key": "k-1"}
    task = call(admin_api, "post", "/queues/mail/tasks", enqueue)
    call(admin_api, "post", "/queues/mail/tasks", enqueue)  # idempotent replay: 200
    call(admin_api, "post", "/queues/mail/tasks/batch", {"tasks": [{"payload": {"n": n}} for n in range(3)]})
    call(admin_api, "get", "/queues/mail/tasks?limit=2")
    claimed = call(worker, "post", "/workers/claim", {"worker_id": "w-1", "queue": "mail", "max_tasks": 2})["tasks"]
    first, second = claimed
    lease = {"worker_id": "w-1", "task_id": first["id"], "lease_token": first["lease_token"]}
    call(worker, "post", "/workers/heartbeat", lease)
    call(worker, "post", "/workers/ack", {**lease, "result": {"sent": True}})
    call(worker, "post", "/workers/ack", lease)  # a repeated ack
    call(worker, "post", "/workers/nack", {"worker_id": "w-1", "task_id": second["id"], "error": "no", "retry": False})
    call(admin_api, "get", f"/queues/mail/tasks/{task['id']}")
    batch = {"worker_id": "w-1", "items": [{"task_id": first["id"]}, {"task_id": str(TaskFactory().id)}]}
    call(worker, "post", "/workers/ack/batch", batch)
    nack_batch = {"worker_id": "w-1", "items": [{"task_id": second["id"], "error": "late"}]}
    call(worker, "post", "/workers/nack/batch", nack_batch)
    call(admin_api, "get", "/workers")
    call(admin_api, "get", "/queues/mail/stats")
    call(admin_api, "get", "/queues/mail/dlq")
    call(admin_api, "post", f"/queues/mail/dlq/{second['id']}/replay")
    call(admin_api, "post", "/queues/mail/dlq/replay", {"all": True})
    (pending,) = [
        t for t in call(admin_api, "get", "/queues/mail/tasks?status=pending")["results"] if t["priority"] == 5
    ][:1]
    call(admin_api, "delete", f"/queues/mail/tasks/{pending['id']}")
    call(admin_api, "post", "/queues/mail/purge")
    dead = TaskFactory(queue=QueueFactory(name="mail"), dead=True)
    call(admin_api, "delete", f"/queues/mail/dlq/{dead.id}")

    # Errors, in the one shape.
    call(admin_api, "get", "/queues/nope")
    call(admin_api, "post", "/queues/mail/tasks", {"payload": {}, "priority": 11}, bad=True)
    call(admin_api, "post", "/queues", {"name": "mail"})
    call(admin_api, "delete", f"/queues/mail/tasks/{task['id']}")
    call(worker, "post", "/workers/heartbeat", lease)
    call(worker, "get", "/queues")
    check(Client().get("/queues"), "get", "/queues")
    call(admin_api, "delete", "/queues/mail")

    statuses = {status for _, _, status in check.checked}
    assert {200, 201, 204, 400, 401, 403, 404, 409} <= statuses
