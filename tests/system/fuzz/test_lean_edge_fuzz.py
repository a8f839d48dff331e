"""The schemathesis fuzz of the hot calls, against a real server: the lean edge answers them.

``test_schemathesis`` fuzzes every operation through Django's WSGI handler,
in process; the ASGI server answers enqueue, batch enqueue, claim, heartbeat,
ack, nack and the batch acks and nacks through ``taskforge.http.lean`` instead,
so those eight are fuzzed again over HTTP, with the same checks, the same
schema and the same roles. Bounded like
the in-process fuzz (``FUZZ_MAX_EXAMPLES``).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from queues.apikeys import create_key
from tests.factories import QueueFactory, TaskFactory
from tests.system.fuzz.test_schemathesis import CHECKS, MAX_EXAMPLES, ROLES, _aim, schema

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HOT = (
    "/queues/{name}/tasks",
    "/queues/{name}/tasks/batch",
    "/workers/claim",
    "/workers/heartbeat",
    "/workers/ack",
    "/workers/ack/batch",
    "/workers/nack",
    "/workers/nack/batch",
)
hot_calls = schema.include(method="POST", path=list(HOT))


@pytest.fixture
def live_world(live_stack):  # type: ignore[no-untyped-def]
    """The fuzz's world (a queue, a task in each state, a key per role), committed, and a server."""
    queue = QueueFactory(name="fuzz")
    tasks = [
        TaskFactory(queue=queue),
        TaskFactory(queue=queue, claimed=True),
        TaskFactory(queue=queue, dead=True),
        TaskFactory(queue=queue, done=True),
    ]
    keys = {role: create_key(f"fuzz-{role}", role)[1] for role in ROLES}
    world = {"queue": queue.name, "task_ids": [str(t.id) for t in tasks], "keys": keys}
    return world, live_stack.start_api(workers=1)


@hot_calls.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_hot_calls_over_http_never_5xx_and_answer_as_documented(case, live_world):  # type: ignore[no-untyped-def]
    world, url = live_world
    _aim(case, world)
    for role in ROLES:
        case.call_and_validate(base_url=url, headers={"Authorization": f"Bearer {world['keys'][role]}"}, checks=CHECKS)
