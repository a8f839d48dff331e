"""The secret key setting: a well-known placeholder is refused in production, tolerated in development.

That a production process with such a key refuses to start at all is checked
through ``manage.py`` in tests/integration/security/test_deploy_settings.py.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

import taskforge.settings as django_settings_module


@pytest.mark.parametrize(
    ("secret", "placeholder"),
    [
        ("change-me", True),
        ("CHANGEME", True),
        ("please_change_me_now", True),
        ("django-insecure-abc123", True),
        ("secret", True),
        ("test-only-not-secret", False),
        ("x" * 50, False),
    ],
)
def test_placeholder_secrets_are_recognised(secret, placeholder):
    assert django_settings_module._is_placeholder(secret) is placeholder


def test_a_placeholder_is_refused_without_debug_and_tolerated_with_it(monkeypatch):
    monkeypatch.setenv("DJANGO_SECRET_KEY", "change-me")
    monkeypatch.setattr(django_settings_module, "DEBUG", False)
    with pytest.raises(ImproperlyConfigured, match="placeholder"):
        django_settings_module._secret_key()
    monkeypatch.setattr(django_settings_module, "DEBUG", True)
    assert django_settings_module._secret_key() == "change-me"
