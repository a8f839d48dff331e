"""The claim, heartbeat, ack and nack fast paths (single and batch) agree with their serializers on every body
they accept, and leave the rest to them."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.exceptions import ValidationError

from tests.unit.shortcuts import agreeing
from workers.inputs import (
    AckBatchSerializer,
    AckSerializer,
    ClaimSerializer,
    HeartbeatSerializer,
    NackBatchSerializer,
    NackSerializer,
    plain_claim,
    plain_lease_batch,
    plain_lease_call,
    validate_lease_batch,
    validate_lease_call,
)

TASK = "0b5d3c8e-6f0a-4a57-9d2e-3f1c2b4a5e6f"
WORKER_IDS = ["w-1", "", " w ", "w" * 200, "w" * 201, "wörker", "a\x00b", 7, None]
TASK_IDS = [TASK, TASK.upper(), TASK.replace("-", ""), "{" + TASK + "}", TASK[:-1] + "g", 1, None]
TOKENS = [..., None, "tok", "", "  ", " tok", "t" * 64, "t" * 65, "tök", 5]
RESULTS = [..., None, {}, {"ok": True}, [], "done", 1]
PROGRESS = [..., None, {}, {"step": 1}, {"blob": "x" * 5000}, [], 3]
ERRORS = [..., "boom", "", "e" * 65536, "e" * 65537, "fehler ü", "a\x00b", None, 1]
RETRIES = [..., True, False, 1, None]
DELAYS = [..., None, 0, 2_592_000, 2_592_001, -1, True, 1.0]
RELEASES = [..., False, True, 0]
EXTRAS: list[dict[str, Any]] = [{}, {"unknown": 1}]


def _with(body: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**body, **{name: value for name, value in fields.items() if value is not ...}}


def _leases() -> Iterator[dict[str, Any]]:
    for worker_id, task_id, token in itertools.product(WORKER_IDS, TASK_IDS, TOKENS):
        yield _with({"worker_id": worker_id, "task_id": task_id}, lease_token=token)


def _bodies(serializer_class: type) -> Iterator[dict[str, Any]]:
    plain = {"worker_id": "w-1", "task_id": TASK, "lease_token": "tok"}
    for extra in EXTRAS:
        for lease in _leases():
            yield {**lease, **extra}
    if serializer_class is AckSerializer:
        for result in RESULTS:
            yield _with(plain, result=result)
    elif serializer_class is HeartbeatSerializer:
        for progress in PROGRESS:
            yield _with(plain, progress=progress)
    else:
        for error, retry, delay, release in itertools.product(ERRORS, RETRIES, DELAYS, RELEASES):
            yield _with(plain, error=error, retry=retry, retry_after_seconds=delay, release=release)
    yield {}
    yield []  # type: ignore[misc]


@pytest.mark.parametrize("require_token", [False, True])
@pytest.mark.parametrize("serializer_class", [HeartbeatSerializer, AckSerializer, NackSerializer])
def test_the_fast_path_never_disagrees_with_the_serializer(serializer_class, require_token, settings):
    settings.TASKFORGE_REQUIRE_LEASE_TOKEN = require_token
    shortcut = functools.partial(plain_lease_call, serializer_class)
    assert agreeing(shortcut, serializer_class, _bodies(serializer_class)) > 5  # common shapes take the fast path


@pytest.mark.parametrize(
    ("serializer_class", "body"),
    [
        (AckSerializer, {"worker_id": "w", "task_id": TASK, "lease_token": " tok "}),  # DRF trims it: its call
        (AckSerializer, {"worker_id": "w", "task_id": TASK, "result": []}),
        (HeartbeatSerializer, {"worker_id": "w", "task_id": TASK, "progress": {"blob": "x" * 5000}}),
        (NackSerializer, {"worker_id": "w", "task_id": TASK, "error": "e", "release": True, "retry": False}),
        (NackSerializer, {"worker_id": "w", "task_id": TASK, "error": ""}),
        (NackSerializer, {"worker_id": "w", "task_id": TASK}),
    ],
)
def test_bodies_the_fast_path_leaves_are_the_serializers_to_judge(serializer_class, body):
    assert plain_lease_call(serializer_class, body) is None
    serializer = serializer_class(data=body)
    if serializer.is_valid():
        assert validate_lease_call(serializer_class, body) == dict(serializer.validated_data)


QUEUES = [..., None, "q", "", " q", "q" * 200, "q" * 201, "очередь", 3]
MAX_TASKS = [..., 1, 10, 100, 0, 101, True, 1.0, "1", None]
WAITS = [..., 0, 30, 31, -1, False, 5.0, None]


def test_the_claims_fast_path_never_disagrees_with_the_serializer():
    bodies = (
        _with({"worker_id": worker_id, **extra}, queue=queue, max_tasks=max_tasks, wait_seconds=wait)
        for worker_id, queue, max_tasks, wait, extra in itertools.product(WORKER_IDS, QUEUES, MAX_TASKS, WAITS, EXTRAS)
    )
    assert agreeing(plain_claim, ClaimSerializer, bodies) > 100
    assert plain_claim([]) is None and plain_claim({}) is None


BATCHES = {AckBatchSerializer: AckSerializer, NackBatchSerializer: NackSerializer}


def _batches(serializer_class: type) -> Iterator[Any]:
    """Batches of the single call's bodies (its worker id moved out of the items), and the list's own edges."""
    items = []
    for body in _bodies(BATCHES[serializer_class]):
        if isinstance(body, dict):
            items.append({name: value for name, value in body.items() if name != "worker_id"})
    plain = items[0]
    for item in items:
        yield {"worker_id": "w-1", "items": [item]}
        yield {"worker_id": "w-1", "items": [plain, item, plain]}
    for worker_id in WORKER_IDS:
        yield {"worker_id": worker_id, "items": [plain]}
    for count in (0, 1, 100, 101):
        yield {"worker_id": "w-1", "items": [plain] * count}
    yield {"worker_id": "w-1", "items": [{**plain, "worker_id": "w-1"}]}  # an item names no worker
    yield {"worker_id": "w-1", "items": plain}
    yield {"worker_id": "w-1", "items": [plain], "unknown": 1}
    yield {"worker_id": "w-1"}
    yield {"items": [plain]}
    yield [plain]


@pytest.mark.parametrize("require_token", [False, True])
@pytest.mark.parametrize("serializer_class", list(BATCHES))
def test_the_batch_fast_path_never_disagrees_with_the_serializer(serializer_class, require_token, settings):
    settings.TASKFORGE_REQUIRE_LEASE_TOKEN = require_token
    shortcut = functools.partial(plain_lease_batch, serializer_class)
    assert agreeing(shortcut, serializer_class, _batches(serializer_class)) > 10  # common shapes take the fast path


@pytest.mark.parametrize("serializer_class", list(BATCHES))
def test_batches_the_fast_path_leaves_are_the_serializers_to_judge(serializer_class):
    plain = {"task_id": TASK, "lease_token": "tok"}
    if serializer_class is NackBatchSerializer:
        plain["error"] = "boom"
    left = {"worker_id": "w", "items": [plain, {**plain, "lease_token": " tok "}]}  # DRF trims a token
    assert plain_lease_batch(serializer_class, left) is None
    serializer = serializer_class(data=left)
    assert serializer.is_valid(), serializer.errors
    assert validate_lease_batch(serializer_class, left) == dict(serializer.validated_data)
    for refused in ({"worker_id": "w", "items": [plain, {"task_id": "nope"}]}, None, [plain]):
        with pytest.raises(ValidationError) as caught:
            validate_lease_batch(serializer_class, refused)
        reference = serializer_class(data=refused)
        assert not reference.is_valid()
        assert caught.value.detail == reference.errors, refused  # the serializer's own words ("No data provided")
