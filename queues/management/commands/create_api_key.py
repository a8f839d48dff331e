"""``manage.py create_api_key NAME --role admin|producer|worker``.

The raw key is printed once, as the last line of stdout; only its hash is kept.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from queues.apikeys import command_actor, create_key
from queues.models import ApiKey


class Command(BaseCommand):
    help = "Create an API key and print it (once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--role", required=True, choices=ApiKey.Role.values)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            key, raw = create_key(options["name"], options["role"], actor=command_actor())
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(f"Created {key.role} key {key.name!r}. Store it now: it is not shown again.")
        self.stdout.write(raw)
