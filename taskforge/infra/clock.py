"""Postgres' clock, the only one TaskForge trusts (a process's own clock may be skewed)."""

from __future__ import annotations

from datetime import datetime

from django.db import connection


def database_now() -> datetime:
    """Postgres' ``now()`` (the start of the current transaction)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    return now  # type: ignore[no-any-return]
