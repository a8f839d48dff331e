"""Fixtures for the admin pages: logged-in Django test clients.

Users get no password: ``force_login`` needs none, and hashing one costs
about half a second of CPU per test.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client


@pytest.fixture
def staff(db: None):  # type: ignore[no-untyped-def]
    return get_user_model().objects.create_superuser("oncall", "oncall@example.com", None)


@pytest.fixture
def staff_client(staff) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def viewer_client(db: None) -> Client:
    """Staff who may look at tasks and the DLQ but not change anything."""
    user = get_user_model().objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_task", "view_deadlettertask", "view_queue"])
    )
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def user_client(db: None) -> Client:
    """Logged in, but not staff."""
    user = get_user_model().objects.create_user("someone")
    client = Client()
    client.force_login(user)
    return client
