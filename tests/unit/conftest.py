"""The unit tier: pure logic, no Postgres and no Redis, seconds for the whole directory.

pytest-django already refuses database access to tests that do not ask for it,
and a test here may not ask for it; the fixture below does the same for Redis.
A test that reaches for either fails here instead of passing only on a machine
where the servers happen to run.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest
import redis.asyncio.connection
import redis.connection

UNIT_TESTS = Path(__file__).resolve().parent

#: Fixtures that give a test a database (or a server that uses one).
DATABASE_FIXTURES = frozenset({"db", "transactional_db", "django_db_setup", "live_server"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not item.path.is_relative_to(UNIT_TESTS):
            continue
        wants_database = DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))
        if wants_database or item.get_closest_marker("django_db"):
            raise pytest.UsageError(f"{item.nodeid} asks for the database; it belongs in tests/integration")


def _refuse_redis(*args: object, **kwargs: object) -> NoReturn:
    raise AssertionError("a unit test tried to connect to Redis; it belongs in tests/integration")


@pytest.fixture(autouse=True)
def no_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis.connection.AbstractConnection, "connect", _refuse_redis)
    monkeypatch.setattr(redis.asyncio.connection.AbstractConnection, "connect", _refuse_redis)
