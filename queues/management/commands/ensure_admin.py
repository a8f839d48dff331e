"""Make sure an admin API key and an admin superuser exist (idempotent).

Used on first start by ``make run`` and the Docker ``migrate`` service. With
``--credentials-file`` the generated secrets are kept there (mode 0600) and
reused on later starts; otherwise they come from the options.
``--worker-api-key`` also installs a worker-role key (named ``workers``) for
the deployed workers, which need nothing more than the worker protocol.

Without ``DJANGO_DEBUG`` a published placeholder (a ``change-me`` value from
``.env.example`` or the Kubernetes Secret) is refused, exactly as the settings
refuse a placeholder ``DJANGO_SECRET_KEY``: anyone could use it.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from queues.apikeys import create_key, hash_key, new_raw_key
from queues.models import ApiKey
from taskforge.ops.placeholders import PUBLISHED_API_KEYS, PUBLISHED_PASSWORDS, is_placeholder


class Command(BaseCommand):
    help = "Create the admin API key and admin superuser if they do not exist."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--key-name", default="admin")
        parser.add_argument("--api-key", default="", help="raw admin key to install (default: generate)")
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default="", help="superuser password (default: generate)")
        parser.add_argument("--email", default="admin@localhost")
        parser.add_argument("--credentials-file", default="", help="keep generated secrets here (0600)")
        parser.add_argument("--worker-key-name", default="workers")
        parser.add_argument("--worker-api-key", default="", help="raw worker-role key to install (default: none)")

    def handle(self, *args: Any, **options: Any) -> None:
        _refuse_placeholders(options)
        path = Path(options["credentials_file"]) if options["credentials_file"] else None
        saved: dict[str, str] = json.loads(path.read_text()) if path and path.exists() else {}
        api_key = options["api_key"] or saved.get("api_key") or new_raw_key()
        password = options["password"] or saved.get("password") or secrets.token_urlsafe(12)
        username = options["username"]

        key = ApiKey.objects.filter(name=options["key_name"]).first()
        if key is None:
            create_key(options["key_name"], ApiKey.Role.ADMIN, raw=api_key)
        elif key.key_hash != hash_key(api_key):
            api_key = "(kept from an earlier start; create another with create_api_key)"

        worker_key = options["worker_api_key"]
        if worker_key:
            _ensure_key(options["worker_key_name"], ApiKey.Role.WORKER, worker_key)

        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        _refuse_installed_placeholders(user)
        if user is None:
            user_model.objects.create_superuser(username, options["email"], password)
        elif not user.check_password(password):
            password = "(unchanged since it was first set)"

        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump(
                    {
                        **saved,
                        "api_key": saved.get("api_key", api_key),
                        "username": username,
                        "password": saved.get("password", password),
                    },
                    handle,
                )
        self.stdout.write(f"admin API key: {saved.get('api_key', api_key)}")
        self.stdout.write(f"admin login:   {username} / {saved.get('password', password)}")
        if worker_key:
            self.stdout.write(f"worker API key: {worker_key}")


def _refuse_placeholders(options: dict[str, Any]) -> None:
    if settings.DEBUG:
        return  # development tolerates them, like a placeholder DJANGO_SECRET_KEY
    for option, label in (("api_key", "admin API key"), ("worker_api_key", "worker API key"), ("password", "password")):
        if options[option] and is_placeholder(options[option]):
            raise CommandError(
                f"the {label} is a well-known placeholder (change-me); set a random value, e.g. "
                "python -c 'import secrets; print(\"tf_\" + secrets.token_urlsafe(32))', "
                "or write .env with deploy/make_env.py"
            )


def _refuse_installed_placeholders(user: Any) -> None:
    """Refuse to go on while a published placeholder installed by an earlier start is still in use."""
    if settings.DEBUG:
        return
    published = [hash_key(raw) for raw in PUBLISHED_API_KEYS]
    for key in ApiKey.objects.filter(key_hash__in=published, revoked_at__isnull=True):
        raise CommandError(
            f"the active API key {key.name!r} is a published placeholder (change-me); revoke it: "
            f"python manage.py revoke_api_key {key.name}, then create another with create_api_key"
        )
    if user is not None and any(user.check_password(password) for password in PUBLISHED_PASSWORDS):
        raise CommandError(
            f"the password of {user.get_username()!r} is a published placeholder (change-me); "
            f"set another: python manage.py changepassword {user.get_username()}"
        )


def _ensure_key(name: str, role: str, raw: str) -> None:
    """Install ``raw`` as key ``name`` unless a key of that name exists (it is kept: rotate with the commands)."""
    if not ApiKey.objects.filter(name=name).exists():
        try:
            create_key(name, role, raw=raw)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
