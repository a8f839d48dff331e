"""The admin: staff only; every change needs its permission and a POST carrying a CSRF token; audited."""

from __future__ import annotations

import logging

import pytest
from django.contrib import admin
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client, RequestFactory

from queues.models import ApiKey, Status, Task
from tests.factories import QueueFactory, TaskFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _user(username: str, *, staff: bool, superuser: bool = False, view_only: bool = False):
    user = get_user_model().objects.create_user(username, f"{username}@example.com", "pw", is_staff=staff)
    user.is_superuser = superuser
    user.save()
    if view_only:
        user.user_permissions.set(Permission.objects.filter(codename__startswith="view_"))
    return user


def _client(user, *, csrf: bool = True) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def _token(client: Client, url: str) -> str:
    client.get(url)
    return client.cookies["csrftoken"].value


@pytest.fixture
def dead_task():
    return TaskFactory(queue=QueueFactory(name="sec"), dead=True)


def test_anonymous_visitors_are_sent_to_the_login_page(dead_task):
    for url in (
        "/admin/",
        "/admin/queues/task/",
        "/admin/workers/",
        f"/admin/queues/deadlettertask/{dead_task.id}/replay/",
    ):
        response = Client().get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/admin/login/"), url


def test_an_active_user_without_staff_status_gets_no_admin_page():
    client = _client(_user("plain", staff=False))
    response = client.get("/admin/queues/task/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_every_admin_action_declares_the_permission_it_needs():
    for model, model_admin in admin.site._registry.items():
        for func, name, _ in model_admin._get_base_actions():
            assert getattr(func, "allowed_permissions", None), f"{model.__name__} admin action {name!r}"


def test_staff_with_only_view_permissions_are_offered_no_action():
    request = RequestFactory().get("/admin/")
    request.user = _user("viewer", staff=True, view_only=True)
    for model, model_admin in admin.site._registry.items():
        assert model_admin.get_actions(request) == {}, model.__name__


def test_replay_needs_a_post_with_a_csrf_token(dead_task):
    client = _client(_user("root", staff=True, superuser=True))
    url = f"/admin/queues/deadlettertask/{dead_task.id}/replay/"
    assert client.get(url + "?confirm=yes").status_code == 200  # a confirmation page, nothing more
    assert client.post(url, {"confirm": "yes"}).status_code == 403  # no CSRF token
    dead_task.refresh_from_db()
    assert dead_task.status == Status.DEAD
    token = _token(client, url)
    assert client.post(url, {"confirm": "yes", "csrfmiddlewaretoken": token}).status_code == 302
    dead_task.refresh_from_db()
    assert dead_task.status == Status.PENDING
    entry = LogEntry.objects.get(object_id=str(dead_task.id))
    assert entry.user.username == "root"


def test_view_only_staff_cannot_replay_discard_cancel_or_purge(dead_task):
    client = _client(_user("viewer", staff=True, view_only=True))
    pending = TaskFactory(queue=dead_task.queue)
    posts = [
        (f"/admin/queues/deadlettertask/{dead_task.id}/replay/", {"confirm": "yes"}),
        (f"/admin/queues/deadlettertask/{dead_task.id}/discard/", {"confirm": "yes"}),
        ("/admin/queues/deadlettertask/replay-matching/", {"confirm": "yes"}),
        (f"/admin/queues/task/{pending.id}/cancel/", {"confirm": "yes"}),
        (f"/admin/queues/task/{pending.id}/retry-now/", {}),
        (
            "/admin/queues/queue/",
            {"action": "purge_queues", "_selected_action": [dead_task.queue.pk], "confirm": "yes"},
        ),
        ("/admin/queues/deadlettertask/", {"action": "discard_selected", "_selected_action": [dead_task.pk]}),
    ]
    token = _token(client, "/admin/queues/task/")
    for url, data in posts:
        response = client.post(url, {**data, "csrfmiddlewaretoken": token})
        assert response.status_code in (200, 302, 403), url
    assert Task.objects.get(pk=dead_task.pk).status == Status.DEAD
    assert Task.objects.get(pk=pending.pk).status == Status.PENDING
    assert not LogEntry.objects.exists()


def test_api_keys_created_and_revoked_in_the_admin_are_recorded_with_the_user(caplog):
    caplog.set_level(logging.INFO, logger="taskforge.ops.audit")
    client = _client(_user("keeper", staff=True, superuser=True))
    token = _token(client, "/admin/queues/apikey/add/")
    created = client.post(
        "/admin/queues/apikey/add/", {"name": "ci", "role": "worker", "csrfmiddlewaretoken": token}, follow=True
    )
    assert created.status_code == 200
    key = ApiKey.objects.get(name="ci")
    raw = next(str(m) for m in created.context["messages"] if "tf_" in str(m)).rsplit(" ", 1)[-1]
    assert raw.startswith(key.prefix)
    revoked = client.post(
        "/admin/queues/apikey/",
        {"action": "revoke_keys", "_selected_action": [key.pk], "csrfmiddlewaretoken": token},
    )
    assert revoked.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
    flags = sorted(
        LogEntry.objects.filter(object_id=str(key.pk), user__username="keeper").values_list("action_flag", flat=True)
    )
    assert flags == [ADDITION, CHANGE]
    audit = [(r.event, r.actor) for r in caplog.records if r.name == "taskforge.ops.audit"]  # type: ignore[attr-defined]
    assert audit == [("apikey.created", "admin:keeper"), ("apikey.revoked", "admin:keeper")]
    assert not any(raw in r.getMessage() or raw in str(r.__dict__) for r in caplog.records)
