"""Task and DLQ list pages stop at a byte budget as well as at ``limit``; ``next`` still walks every row."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from queues.api import pages
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db

BLOB = "x" * 1000  # each payload renders as about 1 KB of JSON text


@pytest.fixture(autouse=True)
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages, "PAGE_BYTES", 3500)


def _walk(client, url: str) -> list[list[str]]:  # type: ignore[no-untyped-def]
    """The ids of every page, following ``next`` to the end."""
    seen, cursor = [], None
    while True:
        response = client.get(url, {"limit": 50, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.content
        body = response.json()
        seen.append([row["id"] for row in body["results"]])
        cursor = body["next"]
        if cursor is None:
            return seen


def _spread(count: int, **traits):  # type: ignore[no-untyped-def]
    queue = QueueFactory(name="mail")
    now = timezone.now()
    return [
        TaskFactory(queue=queue, payload={"blob": BLOB, "n": i}, created_at=now - timedelta(seconds=i), **traits)
        for i in range(count)
    ]


def test_a_task_page_holds_at_most_the_byte_budget_and_next_reaches_every_task(producer) -> None:  # type: ignore[no-untyped-def]
    tasks = _spread(10)
    walked = _walk(producer, "/queues/mail/tasks")
    assert all(1 <= len(page) <= 3 for page in walked), walked
    assert [i for page in walked for i in page] == [str(task.id) for task in tasks], "newest first, none lost"


def test_a_row_bigger_than_the_budget_is_still_served_alone(producer) -> None:  # type: ignore[no-untyped-def]
    queue = QueueFactory(name="mail")
    big = TaskFactory(queue=queue, payload={"blob": "y" * 10_000})
    small = TaskFactory(queue=queue, created_at=big.created_at - timedelta(seconds=1))
    assert _walk(producer, "/queues/mail/tasks") == [[str(big.id)], [str(small.id)]]


def test_small_rows_still_fill_the_page_up_to_limit(producer) -> None:  # type: ignore[no-untyped-def]
    queue = QueueFactory(name="mail")
    TaskFactory.create_batch(5, queue=queue)
    body = producer.get("/queues/mail/tasks", {"limit": 5}).json()
    assert len(body["results"]) == 5 and body["next"] is None


def test_the_dlq_list_is_bounded_the_same_way(admin_api) -> None:  # type: ignore[no-untyped-def]
    tasks = _spread(7, dead=True)
    for task in tasks:  # the entry keeps its own copy of the payload
        task.dead_letter.payload = task.payload
        task.dead_letter.died_at = task.created_at
        task.dead_letter.save()
    walked = _walk(admin_api, "/queues/mail/dlq")
    assert all(1 <= len(page) <= 3 for page in walked) and len(walked) >= 3, walked
    assert [i for page in walked for i in page] == [str(task.id) for task in tasks]
