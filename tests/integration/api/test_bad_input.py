"""API.md "Bad input": every malformed request is a 4xx in the error shape, never a 500, and stores nothing.

One test (or one parametrised row) per rule. Each asserts the status, the error code,
and that no row of any table appeared or changed.
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta

import httpx
import orjson
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from queues.apikeys import create_key
from queues.models import Queue, Status, Task
from tests.factories import QueueFactory, TaskFactory
from tests.integration.api.support import assert_error, counts, enqueue

pytestmark = pytest.mark.django_db

TASKS = "/queues/email_jobs/tasks"
FIXED_ID = "6f1c2a3e-0000-4000-8000-000000000001"  # parameter ids must be the same in every xdist worker


def raw_post(client, path, raw: bytes | str, content_type="application/json", **headers):
    data = raw.encode() if isinstance(raw, str) else raw
    return client.generic("POST", path, data, content_type=content_type, **headers)


def refused(response, status, code, *, fields=None, before=None):
    error = assert_error(response, status, code, fields=fields)
    if before is not None:
        assert counts() == before
    return error


def nested(depth: int) -> str:
    """A JSON body ``depth`` containers deep (the body itself is the first)."""
    inner = "1"
    for _ in range(depth - 1):
        inner = f'{{"a": {inner}}}'
    return f'{{"payload": {inner}}}'


# --- not JSON, not an object ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    ["{", '{"payload": {}', "{'payload': {}}", '{"payload": {},}', "payload=1", "", " ", '{"payload": {}} x'],
    ids=["open", "unclosed", "single-quotes", "trailing-comma", "form", "empty", "blank", "trailing-garbage"],
)
def test_invalid_json_is_400(producer, queue, raw):
    before = counts()
    refused(raw_post(producer, TASKS, raw), 400, "validation_error", before=before)


@pytest.mark.parametrize("raw", ["[]", '[{"payload": {}}]', '"payload"', "5", "null", "true"])
def test_top_level_that_is_not_an_object_is_400(producer, queue, raw):
    before = counts()
    refused(raw_post(producer, TASKS, raw), 400, "validation_error", before=before)


def test_invalid_utf8_is_400(producer, queue):
    before = counts()
    refused(raw_post(producer, TASKS, b'{"payload": {"a": "\xff\xfe"}}'), 400, "validation_error", before=before)


# --- nesting -------------------------------------------------------------------------------------------


def test_nesting_up_to_64_levels_is_accepted(producer, queue):
    assert json.loads(nested(64))  # 64 levels deep, counting the body itself
    assert raw_post(producer, TASKS, nested(64)).status_code == 201


@pytest.mark.parametrize("depth", [65, 100, 100_000])
def test_nesting_deeper_than_64_is_400(producer, queue, depth):
    raw = nested(depth) if depth < 1000 else '{"payload": {"a": ' + "[" * depth + "]" * depth + "}}"
    before = counts()
    refused(raw_post(producer, TASKS, raw), 400, "validation_error", before=before)


def test_deep_lists_count_too(producer, queue):
    raw = '{"payload": {"a": ' + "[" * 70 + "]" * 70 + "}}"
    before = counts()
    refused(raw_post(producer, TASKS, raw), 400, "validation_error", before=before)


# --- values jsonb cannot store ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        '{"payload": {"x": NaN}}',
        '{"payload": {"x": Infinity}}',
        '{"payload": {"x": -Infinity}}',
        '{"payload": {"x": 1e400}}',
        '{"payload": {}, "priority": NaN}',
    ],
    ids=["nan", "inf", "-inf", "overflow", "nan-field"],
)
def test_nan_and_infinity_are_400(producer, queue, raw):
    before = counts()
    refused(raw_post(producer, TASKS, raw), 400, "validation_error", before=before)


@pytest.mark.parametrize(
    "raw",
    [
        r'{"payload": {"x": "a\u0000b"}}',
        r'{"payload": {"a\u0000": 1}}',
        r'{"payload": {"deep": [{"x": ["\u0000"]}]}}',
        r'{"payload": {}, "idempotency_key": "k\u0000"}',
    ],
    ids=["value", "key", "deep", "idempotency-key"],
)
def test_nul_character_is_400(producer, queue, raw):
    before = counts()
    refused(raw_post(producer, TASKS, raw), 400, "validation_error", before=before)


@pytest.mark.parametrize(
    "raw",
    [
        r'{"payload": {"x": "\ud800"}}',
        r'{"payload": {"x": "\udc00"}}',
        r'{"payload": {"x": "a\ud83d"}}',
        r'{"payload": {"\ud800": 1}}',
    ],
    ids=["high", "low", "truncated-pair", "key"],
)
def test_lone_surrogate_is_400(producer, queue, raw):
    before = counts()
    refused(raw_post(producer, TASKS, raw), 400, "validation_error", before=before)


def test_a_paired_surrogate_is_fine(producer, queue):
    response = raw_post(producer, TASKS, r'{"payload": {"x": "\ud83d\ude00"}}')
    assert response.status_code == 201
    assert response.json()["payload"] == {"x": "😀"}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/workers/claim", r'{"worker_id": "w\u0000"}'),
        ("/workers/nack", r'{"worker_id": "w", "task_id": "%s", "error": "\u0000"}'),
        ("/workers/ack", r'{"worker_id": "w", "task_id": "%s", "result": {"\ud800": 1}}'),
        ("/queues", r'{"name": "q\u0000"}'),
    ],
)
def test_worker_and_queue_bodies_are_held_to_the_same_rules(admin_api, queue, path, body):
    task = TaskFactory(queue=queue, claimed=True, claimed_by="w")
    before = counts()
    refused(raw_post(admin_api, path, body.replace("%s", str(task.id))), 400, "validation_error", before=before)
    assert Task.objects.get(pk=task.pk).status == Status.CLAIMED


# --- unknown and read-only fields ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field", ["priorty", "status", "attempts", "lease_token", "id", "created_at", "claimed_by", "result", "queue"]
)
def test_unknown_or_read_only_enqueue_field_is_named(producer, queue, field):
    before = counts()
    error = refused(
        producer.post(TASKS, {"payload": {}, field: "x"}, format="json"),
        400,
        "validation_error",
        fields=[field],
        before=before,
    )
    assert field in error["message"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/workers/claim", {"worker_id": "w", "queues": "email_jobs"}, "queues"),
        ("/workers/heartbeat", {"worker_id": "w", "task_id": "%s", "status": "executing"}, "status"),
        ("/workers/ack", {"worker_id": "w", "task_id": "%s", "attempts": 0}, "attempts"),
        (
            "/workers/nack",
            {"worker_id": "w", "task_id": "%s", "error": "x", "lease_expires_at": "x"},
            "lease_expires_at",
        ),
        ("/workers/ack/batch", {"worker_id": "w", "items": [{"task_id": "%s", "status": "done"}]}, "items.0.status"),
        ("/queues", {"name": "q", "paused": False, "created_at": "x"}, "created_at"),
        ("/queues/email_jobs/dlq/replay", {"all": True, "replay_count": 0}, "replay_count"),
    ],
)
def test_unknown_fields_elsewhere_are_named(admin_api, queue, path, body, field):
    task = TaskFactory(queue=queue, claimed=True, claimed_by="w")
    body = json.loads(json.dumps(body).replace("%s", str(task.id)))
    before = counts()
    refused(admin_api.post(path, body, format="json"), 400, "validation_error", fields=[field], before=before)
    assert Task.objects.get(pk=task.pk).status == Status.CLAIMED


def test_patch_cannot_write_read_only_queue_fields(admin_api, queue):
    for field, value in {"created_at": "2020-01-01T00:00:00Z", "id": str(uuid.uuid4()), "name": "x"}.items():
        refused(admin_api.patch("/queues/email_jobs", {field: value}, format="json"), 400, "validation_error")
    assert Queue.objects.get().name == "email_jobs"


# --- no type coercion ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("priority", "5"),
        ("priority", 5.5),
        ("priority", 5.0),
        ("priority", True),
        ("priority", None),
        ("priority", 0),
        ("priority", 11),
        ("max_retries", "3"),
        ("max_retries", 26),
        ("max_retries", -1),
        ("max_retries", False),
        ("idempotency_key", 5),
        ("idempotency_key", ""),
        ("idempotency_key", "k" * 256),
        ("payload", "x"),
        ("payload", []),
        ("payload", None),
        ("payload", 5),
        ("scheduled_at", 1767225600),
        ("scheduled_at", True),
    ],
)
def test_enqueue_types_are_not_coerced(producer, queue, field, value):
    body = {"payload": {"a": 1}, field: value}
    before = counts()
    refused(producer.post(TASKS, body, format="json"), 400, "validation_error", fields=[field], before=before)


def test_payload_is_required(producer, queue):
    before = counts()
    refused(
        producer.post(TASKS, {"priority": 3}, format="json"), 400, "validation_error", fields=["payload"], before=before
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"worker_id": "w", "max_tasks": "2"}, "max_tasks"),
        ({"worker_id": "w", "max_tasks": 2.0}, "max_tasks"),
        ({"worker_id": "w", "max_tasks": 0}, "max_tasks"),
        ({"worker_id": "w", "max_tasks": 101}, "max_tasks"),
        ({"worker_id": "w", "wait_seconds": 1.5}, "wait_seconds"),
        ({"worker_id": "w", "wait_seconds": 31}, "wait_seconds"),
        ({"worker_id": "w", "wait_seconds": -1}, "wait_seconds"),
        ({"worker_id": "w", "wait_seconds": True}, "wait_seconds"),
        ({"worker_id": 5}, "worker_id"),
        ({"worker_id": ""}, "worker_id"),
        ({"worker_id": "w" * 201}, "worker_id"),
        ({}, "worker_id"),
        ({"worker_id": "w", "queue": 5}, "queue"),
    ],
)
def test_claim_types_are_not_coerced(worker, queue, body, field):
    TaskFactory(queue=queue)
    before = counts()
    refused(worker.post("/workers/claim", body, format="json"), 400, "validation_error", fields=[field], before=before)
    assert Task.objects.get().status == Status.PENDING


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"result": []}, "result"),
        ({"result": "ok"}, "result"),
        ({"lease_token": 5}, "lease_token"),
        ({"task_id": 5}, "task_id"),
        ({"task_id": "not-a-uuid"}, "task_id"),
        ({"task_id": None}, "task_id"),
    ],
)
def test_ack_types_are_not_coerced(worker, queue, body, field):
    task = TaskFactory(queue=queue, claimed=True, claimed_by="w")
    before = counts()
    response = worker.post("/workers/ack", {"worker_id": "w", "task_id": str(task.id), **body}, format="json")
    refused(response, 400, "validation_error", fields=[field], before=before)
    assert Task.objects.get().status == Status.CLAIMED


@pytest.mark.parametrize(
    "body",
    [{"ids": [1]}, {"ids": ["0123456789"]}, {"all": 1}, {"ids": [None]}],
)
def test_bulk_replay_types_are_not_coerced(admin_api, queue, body):
    dead = TaskFactory(queue=queue, dead=True)
    before = counts()
    refused(
        admin_api.post("/queues/email_jobs/dlq/replay", body, format="json"), 400, "validation_error", before=before
    )
    assert Task.objects.get(pk=dead.pk).status == Status.DEAD


# --- scheduled_at ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "2026-05-20T12:00:00",  # naive
        "2026-05-20 12:00:00",  # naive
        "2026-05-20",  # a date
        "tomorrow",
        "",
        "2026-13-01T00:00:00Z",
        "2026-05-20T12:00:00+25:00",
    ],
)
def test_scheduled_at_must_be_an_aware_timestamp(producer, queue, value):
    before = counts()
    refused(
        producer.post(TASKS, {"payload": {}, "scheduled_at": value}, format="json"),
        400,
        "validation_error",
        fields=["scheduled_at"],
        before=before,
    )


def test_scheduled_at_more_than_365_days_ahead_is_400(producer, queue):
    at = (timezone.now() + timedelta(days=365, minutes=5)).isoformat()
    before = counts()
    refused(
        producer.post(TASKS, {"payload": {}, "scheduled_at": at}, format="json"),
        400,
        "validation_error",
        fields=["scheduled_at"],
        before=before,
    )


def test_far_future_scheduled_at_is_400_not_500(producer, queue):
    before = counts()
    response = producer.post(TASKS, {"payload": {}, "scheduled_at": "9999-12-31T23:59:59-23:59"}, format="json")
    refused(response, 400, "validation_error", fields=["scheduled_at"], before=before)


def test_far_past_scheduled_at_means_now(producer, queue):
    body = enqueue(producer, payload={}, scheduled_at="0001-01-01T00:00:00+01:00")
    assert body["scheduled_at"] == body["created_at"]


# --- queue names -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "a" * 65, "white space", "slash/y", "ünïcode", "semi;colon", "dot.dot", None, 7])
def test_bad_queue_names_are_refused(admin_api, name):
    before = counts()
    refused(
        admin_api.post("/queues", {"name": name}, format="json"),
        400,
        "validation_error",
        fields=["name"],
        before=before,
    )


@pytest.mark.parametrize("name", ["white%20space", "a" * 65, "%E2%98%83", "x%00y", "..", "%2e%2e"])
def test_bad_queue_names_in_paths_are_404(producer, name):
    assert_error(producer.get(f"/queues/{name}"), 404, "not_found")
    before = counts()
    refused(producer.post(f"/queues/{name}/tasks", {"payload": {}}, format="json"), 404, "not_found", before=before)


def test_claim_from_a_bad_queue_name_is_404(worker):
    for name in ("white space", "a" * 65, "nope"):
        assert_error(worker.post("/workers/claim", {"worker_id": "w", "queue": name}, format="json"), 404, "not_found")


# --- ids ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["1", "not-a-uuid", "0" * 31, "g" * 32, "%20", "00000000-0000-0000-0000-00000000000g"])
def test_malformed_ids_in_paths_are_404(admin_api, queue, bad):
    before = counts()
    assert_error(admin_api.get(f"/queues/email_jobs/tasks/{bad}"), 404, "not_found")
    assert_error(admin_api.delete(f"/queues/email_jobs/tasks/{bad}"), 404, "not_found")
    assert_error(admin_api.post(f"/queues/email_jobs/dlq/{bad}/replay"), 404, "not_found")
    assert_error(admin_api.delete(f"/queues/email_jobs/dlq/{bad}"), 404, "not_found")
    assert counts() == before


@pytest.mark.parametrize("path", ["/workers/heartbeat", "/workers/ack", "/workers/nack"])
def test_malformed_task_id_in_a_body_is_400(worker, queue, path):
    before = counts()
    body = {"worker_id": "w", "task_id": "123", **({"error": "x"} if path.endswith("nack") else {})}
    response = worker.post(path, body, format="json")
    refused(response, 400, "validation_error", fields=["task_id"], before=before)


# --- query parameters ----------------------------------------------------------------------------------------------


def cursor_of(value) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")


BAD_TASK_QUERIES = [
    ("created_after=yesterday", "created_after"),
    ("created_after=2026-05-20T12:00:00", "created_after"),  # naive
    ("created_before=2026-05-20", "created_before"),
    ("created_before=", "created_before"),
    ("status=running", "status"),
    ("status=PENDING", "status"),
    ("status=", "status"),
    ("limit=0", "limit"),
    ("limit=501", "limit"),
    ("limit=-1", "limit"),
    ("limit=abc", "limit"),
    ("limit=1.5", "limit"),
    ("limit=", "limit"),
    ("limit=%C2%B2", "limit"),  # a superscript two: a digit to str.isdigit, not to int()
    ("limit=" + "9" * 5000, "limit"),
    ("cursor=abc", "cursor"),
    ("cursor=%%%", "cursor"),
    ("cursor=" + cursor_of(["2026-05-20T12:00:00+00:00"]), "cursor"),
    ("cursor=" + cursor_of(["2026-05-20T12:00:00", FIXED_ID]), "cursor"),
    ("cursor=" + cursor_of(["2026-05-20T12:00:00+00:00", 5]), "cursor"),
    ("cursor=" + cursor_of(["2026-05-20T12:00:00+00:00", ["x"]]), "cursor"),
    ("cursor=" + cursor_of([5, FIXED_ID]), "cursor"),
    ("cursor=" + cursor_of({"a": 1}), "cursor"),
    ("cursor=" + cursor_of("x"), "cursor"),
    ("cursor=" + base64.urlsafe_b64encode(b"\xff\xfe").decode(), "cursor"),
    ("claimed_by=" + "w" * 201, "claimed_by"),
    ("claimed_by=a%00b", "claimed_by"),
]


@pytest.mark.parametrize(("query", "field"), BAD_TASK_QUERIES)
def test_malformed_task_list_query_is_400(producer, queue, query, field):
    TaskFactory(queue=queue)
    refused(producer.get(f"{TASKS}?{query}"), 400, "validation_error", fields=[field])


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("include_replayed=maybe", "include_replayed"),
        ("include_replayed=", "include_replayed"),
        ("include_replayed=yes%00", "include_replayed"),
        ("died_after=never", "died_after"),
        ("died_before=2026-05-20T12:00:00", "died_before"),
        ("limit=1000", "limit"),
        ("cursor=" + cursor_of([1, 2, 3]), "cursor"),
    ],
)
def test_malformed_dlq_query_is_400(admin_api, queue, query, field):
    TaskFactory(queue=queue, dead=True)
    refused(admin_api.get(f"/queues/email_jobs/dlq?{query}"), 400, "validation_error", fields=[field])


def test_extreme_but_valid_timestamps_in_queries(producer, queue):
    TaskFactory(queue=queue)
    for value in ("0001-01-01T00:00:00%2B01:00", "9999-12-31T23:59:59-01:00", "2026-05-20T12:00:00.123456Z"):
        response = producer.get(f"{TASKS}?created_after={value}")
        assert response.status_code in (200, 400), response.content
        if response.status_code == 400:
            assert_error(response, 400, "validation_error", fields=["created_after"])


# --- media types and encodings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=xyz",
        "application/xml",
        "application/jsonx",
        "",
    ],
)
def test_body_that_is_not_json_is_415(producer, queue, content_type):
    before = counts()
    response = raw_post(producer, TASKS, '{"payload": {}}', content_type=content_type)
    refused(response, 415, "unsupported_media_type", before=before)


@pytest.mark.parametrize("charset", ["latin-1", "iso-8859-1", "utf-16", "ascii"])
def test_charset_other_than_utf8_is_415(producer, queue, charset):
    before = counts()
    response = raw_post(producer, TASKS, '{"payload": {}}', content_type=f"application/json; charset={charset}")
    refused(response, 415, "unsupported_media_type", before=before)


@pytest.mark.parametrize("charset", ["utf-8", "UTF-8", '"utf-8"', "utf8"])
def test_charset_utf8_is_accepted(producer, queue, charset):
    response = raw_post(producer, TASKS, '{"payload": {}}', content_type=f"application/json; charset={charset}")
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "GZIP", "gzip, identity"])
def test_content_encoding_is_415(producer, queue, encoding):
    import gzip

    before = counts()
    body = gzip.compress(b'{"payload": {}}')
    response = raw_post(producer, TASKS, body, HTTP_CONTENT_ENCODING=encoding)
    refused(response, 415, "unsupported_media_type", before=before)


def test_identity_encoding_is_accepted(producer, queue):
    assert raw_post(producer, TASKS, '{"payload": {}}', HTTP_CONTENT_ENCODING="identity").status_code == 201


# --- size -------------------------------------------------------------------------------------------------------------


def test_body_over_the_cap_is_413(producer, queue, settings):
    body = orjson.dumps({"payload": {"blob": "x" * settings.TASKFORGE_MAX_PAYLOAD_BYTES}})
    before = counts()
    refused(raw_post(producer, TASKS, body), 413, "payload_too_large", before=before)


def test_batch_over_the_cap_is_413(producer, queue, settings):
    chunk = "x" * 10_000
    items = [{"payload": {"blob": chunk}}] * (settings.TASKFORGE_MAX_PAYLOAD_BYTES // 10_000 + 1)
    before = counts()
    refused(
        raw_post(producer, f"{TASKS}/batch", orjson.dumps({"tasks": items})), 413, "payload_too_large", before=before
    )


def test_declared_length_over_the_cap_is_413_before_reading(producer, queue, settings):
    before = counts()
    response = raw_post(
        producer, TASKS, '{"payload": {}}', CONTENT_LENGTH=str(settings.TASKFORGE_MAX_PAYLOAD_BYTES + 1)
    )
    refused(response, 413, "payload_too_large", before=before)


def test_body_exactly_at_the_cap_is_accepted(producer, queue, settings):
    cap = settings.TASKFORGE_MAX_PAYLOAD_BYTES
    prefix, suffix = b'{"payload": {"blob": "', b'"}}'
    body = prefix + b"x" * (cap - len(prefix) - len(suffix)) + suffix
    assert len(body) == cap
    assert raw_post(producer, TASKS, body).status_code == 201


def test_invalid_content_length_is_400(producer, queue):
    before = counts()
    refused(raw_post(producer, TASKS, '{"payload": {}}', CONTENT_LENGTH="abc"), 400, "validation_error", before=before)


# --- idempotency --------------------------------------------------------------------------------------------------


def test_idempotency_key_reused_with_another_body_is_409(producer, queue):
    enqueue(producer, payload={"a": 1}, idempotency_key="k")
    before = counts()
    response = producer.post(TASKS, {"payload": {"a": 2}, "idempotency_key": "k"}, format="json")
    refused(response, 409, "conflict", before=before)
    assert Task.objects.get().payload == {"a": 1}


def test_duplicate_key_in_one_batch_is_400(producer, queue):
    items = [{"payload": {}, "idempotency_key": "k"}, {"payload": {}, "idempotency_key": "k"}]
    before = counts()
    refused(
        producer.post(f"{TASKS}/batch", {"tasks": items}, format="json"),
        400,
        "validation_error",
        fields=["1.idempotency_key"],
        before=before,
    )


# --- the real server: chunked bodies without a Content-Length -------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_chunked_bodies_are_capped_on_the_real_server(live_stack):
    QueueFactory(name="email_jobs")
    _, key = create_key("chunked", "producer")
    cap = 64 * 1024
    url = live_stack.start_api(extra_env={"TASKFORGE_MAX_PAYLOAD_BYTES": str(cap)})
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def chunks(total: int):
        yield b'{"payload": {"blob": "'
        sent = 0
        while sent < total:
            piece = min(8192, total - sent)
            sent += piece
            yield b"x" * piece
        yield b'"}}'

    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        too_big = client.post(f"{TASKS}", content=chunks(cap + 1024))
        assert too_big.request.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in too_big.request.headers
        assert too_big.status_code == 413, too_big.text
        assert too_big.json()["error"]["code"] == "payload_too_large"
        declared = client.post(f"{TASKS}", content=b"x" * (cap + 1))
        assert declared.status_code == 413
        small = client.post(f"{TASKS}", content=chunks(1000))
        assert small.status_code == 201, small.text
        gzipped = client.post(f"{TASKS}", content=b"{}", headers={"Content-Encoding": "gzip"})
        assert gzipped.status_code == 415
    assert Task.objects.count() == 1

    # An endless upload is cut off at the cap: the server neither buffers nor spools the rest.
    total = 64 * 1024 * 1024
    sent = 0

    def endless():
        nonlocal sent
        piece = b"x" * 65536
        while sent < total:
            sent += len(piece)
            yield piece

    try:
        status = httpx.post(f"{url}{TASKS}", content=endless(), headers=headers, timeout=30).status_code
    except httpx.TransportError:
        status = None  # the server hung up mid-upload, before the client could read its answer
    assert status in (413, None)
    assert sent < total // 4, f"the server read {sent} bytes of an oversized body"
    assert Task.objects.count() == 1


def test_an_internal_error_is_500_without_a_traceback(producer, queue, monkeypatch):
    def broken(queues):
        raise RuntimeError("secret internals: password=hunter2")

    monkeypatch.setattr("queues.api.views.queue_stats", broken)
    response = producer.get("/queues/email_jobs/stats")
    error = assert_error(response, 500, "internal_error")
    assert "hunter2" not in response.content.decode()
    assert "Traceback" not in response.content.decode()
    assert error["message"] == "internal server error"


def test_endpoints_without_a_body_ignore_one_but_keep_the_media_type_rule(admin_api, queue):
    TaskFactory(queue=queue)
    assert raw_post(admin_api, "/queues/email_jobs/purge", "not even json").json() == {"purged": 1}
    before = counts()
    refused(
        raw_post(admin_api, "/queues/email_jobs/purge", "x", content_type="text/plain"),
        415,
        "unsupported_media_type",
        before=before,
    )


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "text/plain;q=1, */*;q=0"])
def test_the_api_answers_json_whatever_accept_says(producer, queue, accept):
    response = producer.get("/queues", HTTP_ACCEPT=accept)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json()["results"][0]["name"] == "email_jobs"
    # ... and an anonymous browser still hears 401 first, not 406.
    assert_error(APIClient().get("/queues", HTTP_ACCEPT=accept), 401, "unauthorized")


@pytest.mark.parametrize("fmt", ["api", "xml", "json"])
def test_a_format_query_parameter_is_ignored(producer, queue, fmt):
    response = producer.get(f"/queues/email_jobs?format={fmt}")
    assert response.status_code == 200
    assert response.json()["name"] == "email_jobs"


@pytest.mark.parametrize("path", ["/queues/email_jobs/tasks?stauts=dead", "/queues/email_jobs/dlq?stauts=dead&limit=5"])
def test_an_unknown_list_parameter_is_a_400_naming_it(admin_api, queue, path):
    assert_error(admin_api.get(path), 400, "validation_error", fields=["stauts"])
