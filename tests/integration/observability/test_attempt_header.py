"""Only the server marks a request as a repeated long-poll attempt: a client's header is dropped at the edge."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.integration.observability.scrape import parse, value

pytestmark = pytest.mark.django_db

# Counted when a request enters Django (a repeated attempt is not: its poll already was).
ENTERED = "django_http_requests_total_by_view_transport_method_total"


def _served(view: str, method: str = "GET") -> float:
    body = Client().get("/metrics").content.decode()
    return value(parse(body), ENTERED, view=view, transport="http", method=method) or 0


@pytest.mark.parametrize("kind", ["again", "last"])
def test_a_clients_attempt_header_does_not_hide_its_requests_from_the_metrics(kind: str) -> None:
    before = _served("healthz")
    for _ in range(3):
        assert Client().get("/healthz", HTTP_X_TASKFORGE_ATTEMPT=kind).status_code == 200
    assert _served("healthz") == before + 3


def test_a_claim_with_a_forged_attempt_header_is_counted_once(worker) -> None:  # type: ignore[no-untyped-def]
    before = _served("worker-claim", method="POST")
    response = worker.post("/workers/claim", {"worker_id": "w1"}, format="json", HTTP_X_TASKFORGE_ATTEMPT="again")
    assert response.status_code == 200, response.content
    assert _served("worker-claim", method="POST") == before + 1
