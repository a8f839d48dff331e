"""Property-based fuzzing of every operation in /api/schema, with each role's key.

Schemathesis generates requests from the OpenAPI document the API serves
(valid ones and, in negative mode, ones the schema forbids) and checks every
answer: never a 5xx, the status code, content type and body documented for
the operation, and schema-invalid input refused. Each generated request is
sent three times, with an admin, a producer and a worker key, so the role
checks are fuzzed too. Path parameters are often pointed at a real queue and
real tasks so that the fuzzing reaches past the 404s.

Bounded for CI: ``FUZZ_MAX_EXAMPLES`` examples per operation and mode
(default 15; ``make fuzz`` runs more).
"""

from __future__ import annotations

import os
import random

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings

from queues.apikeys import create_key
from queues.models import Schedule
from tests.factories import QueueFactory, TaskFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "15"))
ROLES = ("admin", "producer", "worker")
# A stream never ends and the admin is HTML behind a session: not JSON API operations.
EXCLUDED_PATHS = ("/dashboard/stream",)
CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_schema_conformance,
    schemathesis.checks.negative_data_rejection,
]


# Loaded at import, from the API itself (the schema view needs no database).
# (schemathesis.pytest.from_fixture would defer this, but it does not work with pytest 9.)
# The coverage phase (every boundary case and unexpected method of every
# operation, a few thousand requests) is for ``make fuzz``; CI runs the
# explicit examples and the random phase, positive and negative.
CONFIG = schemathesis.Config.from_dict({"phases": {"coverage": {"enabled": os.environ.get("FUZZ_COVERAGE") == "1"}}})
schema = schemathesis.openapi.from_wsgi("/api/schema", get_wsgi_application(), config=CONFIG).exclude(
    path=list(EXCLUDED_PATHS)
)


@pytest.fixture(autouse=True)
def keep_test_connection():
    """Requests go to the WSGI app in this thread: keep it off the test's DB connection.

    Django closes "old" connections when a request starts and ends, which would
    close the connection holding this test's transaction. Django's own test
    client disconnects that handler around its requests; do the same here.
    """
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def world(db):
    """One real queue with a task in each interesting state and a schedule, and a key per role."""
    queue = QueueFactory(name="fuzz")
    tasks = [
        TaskFactory(queue=queue),
        TaskFactory(queue=queue, claimed=True),
        TaskFactory(queue=queue, dead=True),
        TaskFactory(queue=queue, done=True),
    ]
    # A schedule of the same name: schedule paths aimed at "fuzz" reach a real one too.
    Schedule.objects.create(name=queue.name, queue=queue, every_seconds=3600)
    keys = {role: create_key(f"fuzz-{role}", role)[1] for role in ROLES}
    return {"queue": queue.name, "task_ids": [str(t.id) for t in tasks], "keys": keys}


def _aim(case, world) -> None:
    """Point about two thirds of the generated path parameters at real objects."""
    params = case.path_parameters or {}
    chooser = random.Random(repr(sorted(params.items())))
    if "name" in params and chooser.random() < 0.66:
        params["name"] = world["queue"]
    if "task_id" in params and chooser.random() < 0.66:
        params["task_id"] = chooser.choice(world["task_ids"])
    # A valid long poll really waits (up to 30 s): keep the run bounded. Out-of-range
    # values stay as generated (they must be refused, at once).
    body = case.body
    waits = case.operation.path == "/workers/claim" and isinstance(body, dict) and type(body.get("wait_seconds")) is int
    if waits and 0 < body["wait_seconds"] <= 30:
        body["wait_seconds"] = 0


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_api_never_5xx_and_answers_as_documented(case, world):
    _aim(case, world)
    for role in ROLES:
        case.call_and_validate(headers={"Authorization": f"Bearer {world['keys'][role]}"}, checks=CHECKS)
