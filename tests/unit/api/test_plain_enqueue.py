"""The enqueue fast path agrees with EnqueueSerializer on every body it accepts, and leaves the rest to it."""

from __future__ import annotations

import itertools

import pytest

from queues.api.inputs import EnqueueSerializer, plain_enqueue
from tests.unit.shortcuts import agreeing

PAYLOADS = [{}, {"n": 1}, [], "x", None, 1]
PRIORITIES = [..., 1, 5, 10, 0, 11, True, 5.0, "5", None]
KEYS = [..., None, "k", "", "k" * 255, "k" * 256, "ключ", "a\x00b", 7]
RETRIES = [..., None, 0, 25, 26, -1, False, 3.0]
EXTRAS = [{}, {"scheduled_at": None}, {"scheduled_at": "2030-01-01T00:00:00Z"}, {"unknown": 1}]


def _bodies():
    for payload, priority, key, retries, extra in itertools.product(PAYLOADS, PRIORITIES, KEYS, RETRIES, EXTRAS):
        body = {"payload": payload, **extra}
        for name, value in (("priority", priority), ("idempotency_key", key), ("max_retries", retries)):
            if value is not ...:
                body[name] = value
        yield body
    yield {}
    yield []
    yield {"priority": 5}


def test_the_fast_path_never_disagrees_with_the_serializer():
    assert agreeing(plain_enqueue, EnqueueSerializer, _bodies()) > 100  # the common shapes do take the fast path


@pytest.mark.parametrize(
    "body",
    [
        {"payload": {}, "priority": True},
        {"payload": {}, "idempotency_key": ""},
        {"payload": {}, "idempotency_key": "a\x00b"},
        {"payload": {}, "max_retries": 26},
        {"payload": [], "priority": 1},
        {"payload": {}, "extra": 1},
    ],
)
def test_invalid_bodies_are_left_to_the_serializer(body):
    assert plain_enqueue(body) is None
    assert not EnqueueSerializer(data=body).is_valid()
