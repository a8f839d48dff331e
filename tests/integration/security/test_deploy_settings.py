"""Production settings: `check --deploy` is clean, and a missing or placeholder secret stops the process."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest
from django.test import override_settings

from tests.live import ROOT

PRODUCTION = {
    "DJANGO_DEBUG": "false",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/unused",  # check --deploy needs no connection
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "DJANGO_ALLOWED_HOSTS": "tasks.example.com",
    "DJANGO_HSTS_SECONDS": "31536000",
    "DJANGO_HSTS_INCLUDE_SUBDOMAINS": "true",
    "DJANGO_HSTS_PRELOAD": "true",
    "DJANGO_SECURE_SSL_REDIRECT": "true",
}
_STRIP = ("DJANGO_", "TASKFORGE_", "DATABASE_URL", "REDIS_URL")


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(_STRIP)}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_settings():
    done = _manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION, DJANGO_SECRET_KEY=_strong())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


def test_production_defaults_are_secure():
    code = (
        "from django.conf import settings as s; "
        "print(s.DEBUG, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SESSION_COOKIE_HTTPONLY, "
        "s.SECURE_CONTENT_TYPE_NOSNIFF, s.X_FRAME_OPTIONS, s.AUTHENTICATION_BACKENDS)"
    )
    env = {k: v for k, v in PRODUCTION.items() if not k.startswith(("DJANGO_HSTS", "DJANGO_SECURE"))}
    done = _manage("shell", "-c", code, **env, DJANGO_SECRET_KEY=_strong())
    assert done.returncode == 0, done.stderr
    printed = done.stdout.strip().splitlines()[-1]  # the shell may announce its auto-imports first
    assert printed.split()[:6] == ["False", "True", "True", "True", "True", "DENY"]
    assert "ThrottledModelBackend" in printed


def test_missing_secret_refuses_to_start():
    done = _manage("check", **PRODUCTION)
    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in done.stderr


def test_the_example_env_files_placeholder_secret_refuses_to_start():
    done = _manage("check", **PRODUCTION, DJANGO_SECRET_KEY="change-me-django-secret-key-long-and-random")
    assert done.returncode != 0
    assert "placeholder" in done.stderr


def _strong() -> str:
    return secrets.token_urlsafe(50)


@pytest.mark.django_db
@override_settings(SECURE_HSTS_SECONDS=3600, SECURE_HSTS_INCLUDE_SUBDOMAINS=True, SECURE_SSL_REDIRECT=True)
def test_hsts_and_ssl_redirect_apply_but_probes_stay_on_plain_http(client):
    assert client.get("/healthz", secure=True)["Strict-Transport-Security"] == "max-age=3600; includeSubDomains"
    redirected = client.get("/queues")
    assert redirected.status_code == 301
    assert redirected["Location"] == "https://testserver/queues"
    for probe in ("/healthz", "/readyz", "/metrics"):
        assert client.get(probe).status_code in (200, 503), probe
