"""The test database's address, for a test's connection of its own (a writer thread, a second session)."""

from __future__ import annotations

import psycopg
from django.db import connection

# What libpq needs to reach the server; the rest of Django's parameters (its cursor class,
# the pool, the prepare threshold) are for its own connections.
_ADDRESS = ("host", "port", "dbname", "user", "password")


def dsn_of_the_test_database() -> str:
    """The conninfo of the database Django's connection uses, from the same parameters.

    From Django's resolved parameters, not its settings' ``HOST``: a server reached
    through a socket directory (the embedded servers, ``?host=/path``) has it in ``OPTIONS``.
    """
    params = connection.get_connection_params()
    return psycopg.conninfo.make_conninfo(**{key: params[key] for key in _ADDRESS if params.get(key)})
