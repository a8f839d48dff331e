"""Regressions for what the schemathesis run found (each was a 500)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path",
    [
        "/queues/email_jobs/tasks?created_after=0367-07-12T08:46:55%2B23:53",
        "/queues/email_jobs/tasks?created_before=2026-11-29T12:00:00-20:00",
        "/queues/email_jobs/dlq?died_after=2026-11-29T12:00:00-20:00",
    ],
)
def test_offsets_postgres_cannot_store_are_accepted_in_filters(queue, admin_api, path):
    # Python allows offsets up to +-23:59, Postgres up to +-15:59: normalised to UTC first.
    assert admin_api.get(path).status_code == 200


def test_an_enqueue_with_a_large_offset_is_stored_in_utc(queue, producer):
    local = (timezone.now() + timedelta(days=10)).astimezone(timezone.get_fixed_timezone(23 * 60))
    local = local.replace(hour=12, minute=0, second=0, microsecond=0)
    response = producer.post(
        "/queues/email_jobs/tasks", {"payload": {}, "scheduled_at": local.isoformat()}, format="json"
    )
    assert response.status_code == 201, response.content
    stored = datetime.fromisoformat(response.json()["scheduled_at"].replace("Z", "+00:00"))
    assert stored == local
    assert stored.utcoffset() == timedelta(0)


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00%2B01:00", "9999-12-31T23:59:59-01:00"])
def test_a_timestamp_pushed_off_the_calendar_by_its_offset_is_its_first_or_last_instant(queue, admin_api, value):
    response = admin_api.get(f"/queues/email_jobs/tasks?created_after={value}")
    assert response.status_code == 200
