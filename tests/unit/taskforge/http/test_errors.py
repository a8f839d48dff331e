"""The one error shape: every exception a view can raise becomes ``{"error": {"code", "message", "fields"?}}``.

The handler is a function of the exception alone, so each mapping of API.md's
error table is checked here without a request.
"""

from __future__ import annotations

import logging

import pytest
from django import db
from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions as drf

from queues.errors import LeaseLost, QueueNotEmpty, QueueNotFound
from taskforge.http.errors import error_body, exception_handler, flatten_fields


def handled(exc: Exception) -> tuple[int, dict]:
    response = exception_handler(exc, {})
    return response.status_code, response.data


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (QueueNotFound("mail"), 404, "not_found"),
        (LeaseLost("t-1"), 409, "lease_lost"),
        (QueueNotEmpty("mail", 3), 409, "conflict"),
        (drf.NotAuthenticated(), 401, "unauthorized"),
        (drf.AuthenticationFailed("bad key"), 401, "unauthorized"),
        (drf.PermissionDenied(), 403, "forbidden"),
        (PermissionDenied(), 403, "forbidden"),
        (Http404(), 404, "not_found"),
        (drf.MethodNotAllowed("PATCH"), 405, "method_not_allowed"),
        (drf.UnsupportedMediaType("text/plain"), 415, "unsupported_media_type"),
        (drf.ParseError("invalid JSON"), 400, "validation_error"),
        (drf.Throttled(wait=3), 429, "throttled"),
    ],
)
def test_each_error_gets_its_status_and_contract_code(exc, status, code):
    got_status, body = handled(exc)
    assert got_status == status
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert "fields" not in body["error"]


def test_a_domain_error_keeps_its_own_message():
    assert handled(QueueNotEmpty("mail", 3))[1]["error"]["message"].startswith("queue 'mail' still has 3 task(s)")


def test_a_401_says_how_to_authenticate():
    class BearerRequired(drf.NotAuthenticated):
        auth_header = 'Bearer realm="api"'

    response = exception_handler(BearerRequired(), {})
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_a_validation_error_names_every_field_and_quotes_the_first_in_its_message():
    status, body = handled(drf.ValidationError({"priority": ["Must be 1-10."], "payload": ["Required."]}))
    assert status == 400
    assert body["error"] == {
        "code": "validation_error",
        "message": "priority: Must be 1-10.",
        "fields": {"priority": ["Must be 1-10."], "payload": ["Required."]},
    }


def test_batch_errors_are_keyed_by_item_index():
    detail = {"tasks": [{}, {}, {}, {"priority": ["Must be 1-10."]}, {"non_field_errors": ["Expected a JSON object."]}]}
    assert flatten_fields(detail) == {"tasks.3.priority": ["Must be 1-10."], "tasks.4": ["Expected a JSON object."]}
    assert flatten_fields([{}, {"priority": ["x"]}]) == {"1.priority": ["x"]}


def test_an_error_without_a_field_is_a_non_field_error_and_its_own_message():
    status, body = handled(drf.ValidationError("Expected a JSON object."))
    assert status == 400
    assert body["error"]["fields"] == {"non_field_errors": ["Expected a JSON object."]}
    assert body["error"]["message"] == "Expected a JSON object."


@pytest.mark.parametrize("exc", [db.OperationalError("server closed the connection"), db.InterfaceError("closed")])
def test_a_database_outage_is_a_503_the_client_may_retry(exc):
    response = exception_handler(exc, {})
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert response.data["error"]["code"] == "unavailable"
    assert "server closed" not in response.data["error"]["message"]


def test_anything_else_is_a_500_that_reveals_nothing(caplog):
    with caplog.at_level(logging.ERROR, logger="taskforge.http.errors"):
        status, body = handled(KeyError("SELECT secret FROM internals"))
    assert (status, body) == (500, {"error": {"code": "internal_error", "message": "internal server error"}})
    assert "SELECT secret" not in str(body)
    assert caplog.records and caplog.records[0].exc_info  # the traceback goes to the log, not the client


def test_fields_appear_only_when_there_are_some():
    assert error_body("conflict", "taken") == {"error": {"code": "conflict", "message": "taken"}}
    assert error_body("validation_error", "bad", {}) == {"error": {"code": "validation_error", "message": "bad"}}
