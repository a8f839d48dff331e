"""Push queues over the API: the ``push`` field, its secret, rotation, and claims that refuse them."""

from __future__ import annotations

from typing import Any

import pytest

from queues.models import Queue, Task
from tests.factories import QueueFactory, TaskFactory
from tests.integration.api.support import assert_error

pytestmark = pytest.mark.django_db

TARGET = {"url": "https://receiver.example.com/hooks/email"}


def create(admin_api, body: dict[str, Any]):  # type: ignore[no-untyped-def]
    return admin_api.post("/queues", body, format="json")


def test_create_with_push_fills_defaults_and_returns_the_secret_once(admin_api, producer) -> None:  # type: ignore[no-untyped-def]
    response = create(admin_api, {"name": "hooks", "push": TARGET})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["push"] == {**TARGET, "timeout_seconds": 30, "max_concurrent": 10, "headers": {}}
    secret = body["push_secret"]
    assert isinstance(secret, str) and len(secret) >= 32
    shown = producer.get("/queues/hooks").json()
    assert shown["push"] == body["push"] and "push_secret" not in shown
    assert "push_secret" not in producer.get("/queues").json()["results"][0]
    assert Queue.objects.get(name="hooks").push_secret == secret


def test_a_pull_queue_shows_push_null_and_no_secret(admin_api) -> None:  # type: ignore[no-untyped-def]
    body = create(admin_api, {"name": "pulled"}).json()
    assert body["push"] is None and "push_secret" not in body


def test_patch_switches_pull_to_push_and_back(admin_api) -> None:  # type: ignore[no-untyped-def]
    create(admin_api, {"name": "q"})
    target = {**TARGET, "max_concurrent": 3, "timeout_seconds": 5, "headers": {"Authorization": "Bearer abc"}}
    to_push = admin_api.patch("/queues/q", {"push": target}, format="json")
    assert to_push.status_code == 200, to_push.content
    first_secret = to_push.json()["push_secret"]
    assert to_push.json()["push"]["max_concurrent"] == 3
    # Changing the target of a push queue keeps its secret (and does not show it again).
    retarget = admin_api.patch("/queues/q", {"push": {"url": "http://other.example.com/x"}}, format="json").json()
    assert "push_secret" not in retarget
    assert retarget["push"] == {"url": "http://other.example.com/x", "timeout_seconds": 30, "max_concurrent": 10,
                                "headers": {}}  # fmt: skip
    assert Queue.objects.get(name="q").push_secret == first_secret
    # Other fields leave push alone.
    assert admin_api.patch("/queues/q", {"paused": True}, format="json").json()["push"] == retarget["push"]
    back = admin_api.patch("/queues/q", {"push": None}, format="json").json()
    assert back["push"] is None and "push_secret" not in back
    assert Queue.objects.get(name="q").push_secret is None
    again = admin_api.patch("/queues/q", {"push": TARGET}, format="json").json()
    assert again["push_secret"] != first_secret


BAD_PUSH: list[tuple[Any, str]] = [
    ("https://x.example.com", "push"),
    ([], "push"),
    ({}, "push.url"),
    ({"url": 5}, "push.url"),
    ({"url": "ftp://x.example.com/"}, "push.url"),
    ({"url": "https:///nohost"}, "push.url"),
    ({"url": "not a url"}, "push.url"),
    ({"url": "https://user:pw@x.example.com/"}, "push.url"),
    ({"url": "https://x.example.com:99999/"}, "push.url"),
    ({"url": "https://x.example.com/" + "a" * 2048}, "push.url"),
    ({"url": "https://x.example.com/\r\nX: y"}, "push.url"),
    ({**TARGET, "timeout_seconds": 0}, "push.timeout_seconds"),
    ({**TARGET, "timeout_seconds": 1801}, "push.timeout_seconds"),
    ({**TARGET, "timeout_seconds": "30"}, "push.timeout_seconds"),
    ({**TARGET, "timeout_seconds": 2.5}, "push.timeout_seconds"),
    ({**TARGET, "timeout_seconds": True}, "push.timeout_seconds"),
    ({**TARGET, "max_concurrent": 0}, "push.max_concurrent"),
    ({**TARGET, "max_concurrent": 1001}, "push.max_concurrent"),
    ({**TARGET, "max_concurrent": None}, "push.max_concurrent"),
    ({**TARGET, "headers": []}, "push.headers"),
    ({**TARGET, "headers": {"X-Ok": 5}}, "push.headers"),
    ({**TARGET, "headers": {"Bad Name": "v"}}, "push.headers"),
    ({**TARGET, "headers": {"X_Under": "v"}}, "push.headers"),
    ({**TARGET, "headers": {"X-Inject": "a\r\nHost: evil"}}, "push.headers"),
    ({**TARGET, "headers": {f"X-H{i}": "v" for i in range(21)}}, "push.headers"),
    ({**TARGET, "headers": {"Host": "evil"}}, "push.headers"),
    ({**TARGET, "headers": {"content-length": "1"}}, "push.headers"),
    ({**TARGET, "headers": {"Content-Type": "text/plain"}}, "push.headers"),
    ({**TARGET, "headers": {"Transfer-Encoding": "chunked"}}, "push.headers"),
    ({**TARGET, "headers": {"Connection": "close"}}, "push.headers"),
    ({**TARGET, "headers": {"TaskForge-Signature": "v1=0"}}, "push.headers"),
    ({**TARGET, "headers": {"taskforge-anything": "x"}}, "push.headers"),
    ({**TARGET, "secret": "mine"}, "push.secret"),
    ({**TARGET, "priorty": 1}, "push.priorty"),
]


@pytest.mark.parametrize(("push", "field"), BAD_PUSH, ids=[f"{i}-{f}" for i, (_, f) in enumerate(BAD_PUSH)])
def test_bad_push_is_a_400_naming_the_field_and_stores_nothing(admin_api, push, field) -> None:  # type: ignore[no-untyped-def]
    assert_error(create(admin_api, {"name": "bad", "push": push}), 400, "validation_error", fields=[field])
    assert not Queue.objects.filter(name="bad").exists()
    QueueFactory(name="pull")
    assert_error(
        admin_api.patch("/queues/pull", {"push": push}, format="json"), 400, "validation_error", fields=[field]
    )
    assert Queue.objects.get(name="pull").push is None


def test_push_secret_is_read_only_on_the_queue(admin_api) -> None:  # type: ignore[no-untyped-def]
    assert_error(create(admin_api, {"name": "q", "push": TARGET, "push_secret": "x"}), 400, fields=["push_secret"])
    create(admin_api, {"name": "q2", "push": TARGET})
    assert_error(admin_api.patch("/queues/q2", {"push_secret": "x"}, format="json"), 400, fields=["push_secret"])


def test_twenty_headers_with_allowed_names_are_kept(admin_api) -> None:  # type: ignore[no-untyped-def]
    headers = {f"X-Header-{i}": f"value {i}" for i in range(20)}
    body = create(admin_api, {"name": "q", "push": {**TARGET, "headers": headers}}).json()
    assert body["push"]["headers"] == headers


# --- rotation ------------------------------------------------------------------------------------


def test_rotate_returns_a_new_secret_and_keeps_the_previous_one(admin_api) -> None:  # type: ignore[no-untyped-def]
    first = create(admin_api, {"name": "q", "push": TARGET}).json()["push_secret"]
    response = admin_api.post("/queues/q/push-secret")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["name"] == "q" and body["push"]["url"] == TARGET["url"]
    assert body["push_secret"] not in (first, None)
    stored = Queue.objects.get(name="q")
    assert (stored.push_secret, stored.push_previous_secret) == (body["push_secret"], first)
    assert stored.push_secret_rotated_at is not None
    assert admin_api.post("/queues/q/push-secret", {}, format="json").status_code == 200


def test_rotate_of_a_pull_queue_is_409_and_of_an_unknown_queue_404(admin_api) -> None:  # type: ignore[no-untyped-def]
    QueueFactory(name="pull")
    assert_error(admin_api.post("/queues/pull/push-secret"), 409, "conflict")
    assert_error(admin_api.post("/queues/nope/push-secret"), 404, "not_found")


def test_rotate_refuses_unknown_fields_and_roles(admin_api, producer, worker, client) -> None:  # type: ignore[no-untyped-def]
    create(admin_api, {"name": "q", "push": TARGET})
    assert_error(admin_api.post("/queues/q/push-secret", {"force": True}, format="json"), 400, fields=["force"])
    assert_error(admin_api.post("/queues/q/push-secret", [], format="json"), 400)
    assert_error(producer.post("/queues/q/push-secret"), 403, "forbidden")
    assert_error(worker.post("/queues/q/push-secret"), 403, "forbidden")
    assert_error(client.generic("POST", "/queues/q/push-secret"), 401, "unauthorized")
    assert_error(admin_api.get("/queues/q/push-secret"), 405, "method_not_allowed")


def test_setting_push_needs_the_admin_role(producer, worker, client) -> None:  # type: ignore[no-untyped-def]
    QueueFactory(name="q")
    assert_error(producer.patch("/queues/q", {"push": TARGET}, format="json"), 403, "forbidden")
    assert_error(worker.post("/queues", {"name": "x", "push": TARGET}, format="json"), 403, "forbidden")
    assert_error(client.patch("/queues/q", {"push": TARGET}, content_type="application/json"), 401, "unauthorized")
    assert Queue.objects.get(name="q").push is None


# --- claims --------------------------------------------------------------------------------------


def test_a_claim_naming_a_push_queue_is_409(worker) -> None:  # type: ignore[no-untyped-def]
    queue = QueueFactory(name="hooks", push={**TARGET, "timeout_seconds": 30, "max_concurrent": 10, "headers": {}},
                         push_secret="s" * 64)  # fmt: skip
    TaskFactory(queue=queue)
    for wait in (0, 1):
        response = worker.post(
            "/workers/claim", {"worker_id": "w", "queue": "hooks", "wait_seconds": wait}, format="json"
        )
        assert_error(response, 409, "conflict")
    assert Task.objects.get().status == "pending"


def test_a_claim_without_a_queue_skips_push_queues(worker) -> None:  # type: ignore[no-untyped-def]
    push_queue = QueueFactory(name="hooks", push={**TARGET, "timeout_seconds": 30, "max_concurrent": 10,
                                                  "headers": {}}, push_secret="s" * 64)  # fmt: skip
    pushed = TaskFactory(queue=push_queue, priority=1)
    pulled = TaskFactory(queue=QueueFactory(name="pull"), priority=9)
    body = worker.post("/workers/claim", {"worker_id": "w", "max_tasks": 10}, format="json").json()
    assert [t["id"] for t in body["tasks"]] == [str(pulled.id)]
    assert Task.objects.get(id=pushed.id).status == "pending"
