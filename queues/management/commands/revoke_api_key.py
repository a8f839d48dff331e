"""``manage.py revoke_api_key NAME``: the key stops working at once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from queues.apikeys import command_actor, revoke_key


class Command(BaseCommand):
    help = "Revoke an API key by name."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        if not revoke_key(options["name"], actor=command_actor()):
            raise CommandError(f"no active API key named {options['name']!r}")
        self.stdout.write(f"Revoked {options['name']!r}.")
