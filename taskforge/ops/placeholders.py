"""Well-known placeholder secrets: values published in docs and example files.

Anyone can read ``.env.example`` and ``deploy/kubernetes/secret.yaml``, so a
production process must neither sign sessions with one of their values nor
install one as an API key or a password. Pure Python: settings import it.
"""

from __future__ import annotations

# Django's startproject template and common tutorial values, plus the markers
# our own example files use ("change-me").
_PLACEHOLDER_SECRETS = frozenset({"secret", "secret-key", "your-secret-key", "insecure"})
_PLACEHOLDER_MARKERS = ("change-me", "changeme", "change_me", "django-insecure-")


def is_placeholder(secret: str) -> bool:
    lowered = secret.lower()
    return lowered in _PLACEHOLDER_SECRETS or any(marker in lowered for marker in _PLACEHOLDER_MARKERS)


# The API keys and admin password the example files ship, exactly (a test keeps
# them equal to .env.example and deploy/kubernetes/secret.yaml): a key or a
# password installed from them before they were refused is still found.
PUBLISHED_API_KEYS = (
    "tf_change-me-admin-api-key-at-least-32-characters",
    "tf_change-me-worker-api-key-at-least-32-characters",
)
PUBLISHED_PASSWORDS = ("change-me-admin-password",)
