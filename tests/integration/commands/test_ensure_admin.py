"""``ensure_admin``: installs the admin and worker keys, and refuses the published placeholders in production."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from queues.apikeys import create_key
from queues.models import ApiKey
from taskforge.ops.placeholders import PUBLISHED_API_KEYS, PUBLISHED_PASSWORDS
from tests.system.deploy import specs

pytestmark = pytest.mark.django_db

STRONG_ADMIN = "tf_" + "A" * 43
STRONG_WORKER = "tf_" + "W" * 43
STRONG_PASSWORD = "Xq7-strong-password-for-tests"


def _published() -> dict[str, str]:
    """The values .env.example and the Kubernetes Secret ship with."""
    example = specs.read_env_file(specs.ENV_EXAMPLE.read_text())
    secret = specs.kubernetes_by_kind("Secret")["taskforge-secrets"]["stringData"]
    return {
        f"{source}:{name}": value
        for source, values in (("env", example), ("k8s", secret))
        for name, value in values.items()
        if name in {"TASKFORGE_ADMIN_API_KEY", "TASKFORGE_WORKER_API_KEY", "TASKFORGE_ADMIN_PASSWORD"}
    }


def _ensure(**options: str) -> str:
    out = StringIO()
    call_command("ensure_admin", stdout=out, **options)
    return out.getvalue()


@pytest.mark.parametrize("which", sorted(_published()))
def test_a_published_placeholder_is_refused_and_nothing_is_installed(which):
    value = _published()[which]
    option = {
        "TASKFORGE_ADMIN_API_KEY": "api_key",
        "TASKFORGE_WORKER_API_KEY": "worker_api_key",
        "TASKFORGE_ADMIN_PASSWORD": "password",
    }[which.split(":")[1]]
    options = {"api_key": STRONG_ADMIN, "password": STRONG_PASSWORD, "worker_api_key": STRONG_WORKER, option: value}
    with pytest.raises(CommandError, match="placeholder"):
        _ensure(**options)
    assert not ApiKey.objects.exists()
    assert not get_user_model().objects.exists()


def test_placeholders_are_tolerated_in_debug_like_the_secret_key(settings):
    settings.DEBUG = True
    _ensure(api_key="tf_change-me-admin-api-key-at-least-32-characters", password="change-me-admin-password")
    assert ApiKey.objects.get(name="admin").role == ApiKey.Role.ADMIN


def test_the_worker_key_is_installed_with_the_worker_role_only(settings):
    printed = _ensure(api_key=STRONG_ADMIN, password=STRONG_PASSWORD, worker_api_key=STRONG_WORKER)
    assert re.search(r"^worker API key: " + STRONG_WORKER + "$", printed, re.MULTILINE)
    assert ApiKey.objects.get(name="workers").role == ApiKey.Role.WORKER
    worker = APIClient()
    worker.credentials(HTTP_AUTHORIZATION=f"Bearer {STRONG_WORKER}")
    assert worker.post("/workers/claim", {"worker_id": "w1"}, format="json").status_code == 200
    assert worker.get("/workers").status_code == 403
    assert worker.post("/queues", {"name": "q"}, format="json").status_code == 403
    # Idempotent: a second start keeps the one key.
    _ensure(api_key=STRONG_ADMIN, password=STRONG_PASSWORD, worker_api_key=STRONG_WORKER)
    assert ApiKey.objects.filter(name="workers").count() == 1


def test_without_options_it_generates_credentials_as_make_run_uses_it(tmp_path):
    printed = _ensure(credentials_file=str(tmp_path / "credentials.json"))
    assert "admin API key: tf_" in printed
    assert ApiKey.objects.get(name="admin").role == ApiKey.Role.ADMIN


def test_the_published_values_listed_in_code_are_those_of_the_example_files() -> None:
    published = set(_published().values())
    assert published == {*PUBLISHED_API_KEYS, *PUBLISHED_PASSWORDS}


def test_a_placeholder_key_installed_by_an_earlier_start_must_be_revoked_first() -> None:
    create_key("admin", ApiKey.Role.ADMIN, raw=PUBLISHED_API_KEYS[0])  # what an older release accepted
    with pytest.raises(CommandError, match=r"revoke_api_key admin"):
        _ensure(api_key=STRONG_ADMIN, password=STRONG_PASSWORD)
    call_command("revoke_api_key", "admin", stdout=StringIO(), stderr=StringIO())
    assert "admin login:" in _ensure(api_key=STRONG_ADMIN, password=STRONG_PASSWORD), "revoked: it goes on"


def test_a_placeholder_password_set_by_an_earlier_start_must_be_changed_first() -> None:
    get_user_model().objects.create_superuser("admin", "admin@localhost", PUBLISHED_PASSWORDS[0])
    with pytest.raises(CommandError, match="changepassword admin"):
        _ensure(api_key=STRONG_ADMIN, password=STRONG_PASSWORD)
