"""Make sure an admin API key and an admin superuser exist (idempotent).

Used on first start by ``make run`` and the Docker ``migrate`` service. With
``--credentials-file`` the generated secrets are kept there (mode 0600) and
reused on later starts; otherwise they come from the options.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from queues.apikeys import create_key, hash_key, new_raw_key
from queues.models import ApiKey


class Command(BaseCommand):
    help = "Create the admin API key and admin superuser if they do not exist."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--key-name", default="admin")
        parser.add_argument("--api-key", default="", help="raw admin key to install (default: generate)")
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default="", help="superuser password (default: generate)")
        parser.add_argument("--email", default="admin@localhost")
        parser.add_argument("--credentials-file", default="", help="keep generated secrets here (0600)")

    def handle(self, *args: Any, **options: Any) -> None:
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

        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
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
