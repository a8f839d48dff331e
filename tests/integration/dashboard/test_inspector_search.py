"""The task inspector's search box: key=value finds tasks by payload content, besides ids, keys and kinds."""

from __future__ import annotations

import pytest

from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db

URL = "/admin/queues/task/"


def _listed(response) -> set:  # type: ignore[no-untyped-def]
    assert response.status_code == 200
    return {task.id for task in response.context["cl"].result_list}


def test_key_equals_value_searches_payloads_in_every_queue(staff_client):
    mail, other = QueueFactory(name="mail"), QueueFactory(name="other")
    found = {
        TaskFactory(queue=mail, payload={"user_id": "abc123", "n": 1}).id,
        TaskFactory(queue=other, payload={"user_id": "abc123"}).id,
    }
    TaskFactory(queue=mail, payload={"user_id": "abc1234"})
    TaskFactory(queue=mail, payload={"customer": "abc123"})
    assert _listed(staff_client.get(URL, {"q": "user_id=abc123"})) == found


def test_numbers_match_whether_sent_as_numbers_or_strings_and_dots_go_deeper(staff_client):
    queue = QueueFactory(name="mail")
    number = TaskFactory(queue=queue, payload={"user": {"id": 42}})
    text = TaskFactory(queue=queue, payload={"user": {"id": "42"}})
    TaskFactory(queue=queue, payload={"id": 42})
    assert _listed(staff_client.get(URL, {"q": "user.id=42"})) == {number.id, text.id}


def test_a_bare_id_still_finds_its_task(staff_client):
    task = TaskFactory(queue=QueueFactory(name="mail"), payload={"a": 1})
    assert _listed(staff_client.get(URL, {"q": str(task.id)})) == {task.id}
    page = staff_client.get(URL).content.decode()
    assert "key=value" in page  # the search box says what it understands
