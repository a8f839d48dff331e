"""Finishing touches on the generated OpenAPI document (a drf-spectacular hook).

* Paths as the contract writes them (``/queues/{name}``): the URL patterns
  accept an optional trailing slash, which the generator spells as one.
* Who may call each operation, in the words of the view's own permission
  classes (``openapi_description(view_class, method)``, e.g. the role check
  reading the view's declared roles): written once, where it is enforced.
* Request bodies refuse unknown fields (``StrictSerializer``), so their
  schemas say ``additionalProperties: false``.
* The operational endpoints are plain Django views outside DRF; they are
  described here so the document covers the whole contract.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

_ERROR = {"$ref": "#/components/schemas/Error"}
_NO_AUTH: list[dict[str, list[str]]] = [{}]


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_CHECKS = {
    "type": "object",
    "properties": {
        "postgres": {"type": "string", "enum": ["ok", "down"]},
        "redis": {"type": "string", "enum": ["ok", "down"]},
    },
}

_OPERATIONS: dict[str, dict[str, Any]] = {
    "/healthz": {
        "get": {
            "operationId": "healthz",
            "tags": ["operations"],
            "summary": "Liveness: the process serves",
            "security": _NO_AUTH,
            "responses": {
                "200": _json(
                    {"type": "object", "properties": {"status": {"type": "string", "enum": ["ok"]}}}, "Serving."
                )
            },
        }
    },
    "/readyz": {
        "get": {
            "operationId": "readyz",
            "tags": ["operations"],
            "summary": "Readiness: Postgres and Redis answer (and Redis does not evict keys)",
            "security": _NO_AUTH,
            "responses": {
                "200": _json(
                    {
                        "type": "object",
                        "properties": {"status": {"type": "string", "enum": ["ready"]}, "checks": _CHECKS},
                    },
                    "Ready.",
                ),
                "503": _json(
                    {"allOf": [_ERROR, {"type": "object", "properties": {"checks": _CHECKS}}]},
                    "Not ready: the message and `checks` name what is down (code `unavailable`).",
                ),
            },
        }
    },
    "/metrics": {
        "get": {
            "operationId": "metrics",
            "tags": ["operations"],
            "summary": "Prometheus metrics (text exposition format)",
            "description": "Open unless TASKFORGE_METRICS_TOKEN is set; then that token is required as a bearer "
            "token (not an API key).",
            "security": [{}, {"metricsToken": []}],
            "responses": {
                "200": {
                    "description": "Metrics of every TaskForge process.",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                "401": _json(_ERROR, "TASKFORGE_METRICS_TOKEN is set and was not sent."),
            },
        }
    },
    "/dashboard/stream": {
        "get": {
            "operationId": "dashboard_stream",
            "tags": ["operations"],
            "summary": "Server-sent events feeding the dashboard",
            "description": "A staff session (admin login) is required; API keys are not accepted. One "
            "`event: stats` at least every 2 seconds.",
            "security": [{"sessionCookie": []}],
            "responses": {
                "200": {
                    "description": "An endless event stream.",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                "403": {"description": "Not logged in as staff."},
            },
        }
    },
}

_SCHEMES = {
    "metricsToken": {"type": "http", "scheme": "bearer", "description": "The value of TASKFORGE_METRICS_TOKEN."},
    "sessionCookie": {"type": "apiKey", "in": "cookie", "name": "sessionid", "description": "Admin login session."},
}


def _contract_path(generated: str) -> str:
    return generated.rstrip("/") or "/"


def _permission_notes(view_class: type, method: str) -> list[str]:
    notes = []
    for permission in getattr(view_class, "permission_classes", ()):
        describe = getattr(permission, "openapi_description", None)
        note = describe(view_class, method) if describe is not None else None
        if note:
            notes.append(note)
    return notes


def _describe_permissions(paths: dict[str, Any], endpoints: Iterable[tuple[str, str, str, Any]]) -> None:
    """Append each operation's permission notes to its description (once per operation)."""
    described: set[tuple[str, str]] = set()
    for generated_path, _regex, method, callback in endpoints:
        path, view_class = _contract_path(generated_path), getattr(callback, "cls", None)
        operation = paths.get(path, {}).get(method.lower())
        if view_class is None or operation is None or (path, method) in described:
            continue
        described.add((path, method))
        text = "\n\n".join(filter(None, [operation.get("description"), *_permission_notes(view_class, method)]))
        if text:
            operation["description"] = text


def postprocess(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    paths = {_contract_path(path): item for path, item in result.get("paths", {}).items()}
    _describe_permissions(paths, generator.endpoints or ())
    paths.update(_OPERATIONS)
    result["paths"] = dict(sorted(paths.items()))
    components = result.setdefault("components", {})
    components.setdefault("securitySchemes", {}).update(_SCHEMES)
    for name, schema in components.get("schemas", {}).items():
        if name.endswith("Request") and schema.get("type") == "object":
            schema["additionalProperties"] = False
    return result
