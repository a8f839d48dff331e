"""Which checkouts send the empty query (taskforge.infra.postgres.checkout), seen from the server."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from django.db import connection

from taskforge.infra.postgres import aio, checkout
from taskforge.infra.postgres.base import check_connection
from tests import live
from tests.integration.queues.loop import run


def _last_query(pid: int) -> tuple[str, Any]:
    """What the backend ``pid`` ran last and when it started, by pg_stat_activity."""
    with psycopg.connect(live.test_database_url(), autocommit=True) as observer:
        found = observer.execute("SELECT query, query_start FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    assert found is not None
    return found


@pytest.fixture
def pooled() -> Any:
    """A connection of Django's pool, handed out (and so checked) just now; back to the pool afterwards."""
    connection.ensure_connection()  # the pool exists once a connection was asked for
    pool = connection.pool
    conn = pool.getconn()
    yield conn
    pool.putconn(conn)
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_a_connection_handed_out_a_moment_ago_and_quiet_goes_without_the_empty_query(pooled):
    pooled.execute("SELECT 42")
    before = _last_query(pooled.info.backend_pid)
    assert before[0] == "SELECT 42"
    assert not checkout.needs_ping(pooled)
    check_connection(pooled)
    assert _last_query(pooled.info.backend_pid) == before  # nothing reached the server


@pytest.mark.django_db(transaction=True)
def test_a_connection_idle_past_the_window_answers_the_empty_query(pooled, monkeypatch):
    pooled.execute("SELECT 42")
    before = _last_query(pooled.info.backend_pid)
    monkeypatch.setattr(checkout, "RECENT_SECONDS", 0.0)
    assert checkout.needs_ping(pooled)
    check_connection(pooled)
    query, started = _last_query(pooled.info.backend_pid)
    assert query == "" and started > before[1]  # the empty query ran


@pytest.mark.django_db(transaction=True)
def test_a_connection_with_something_to_read_answers_the_empty_query(pooled, monkeypatch):
    """A message the server sent unasked (here a notification on a channel it listens to) makes the
    socket readable: whatever it is, the connection is checked with the round trip."""
    monkeypatch.setattr(checkout, "RECENT_SECONDS", 3600.0)  # only what is on the socket can call for it
    pooled.execute("LISTEN checkout_test")
    with psycopg.connect(live.test_database_url(), autocommit=True) as other:
        other.execute("NOTIFY checkout_test")
    # The listening backend sends the notification once it gets round to it.
    deadline = time.monotonic() + 5
    while not checkout.needs_ping(pooled) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert checkout.needs_ping(pooled)
    check_connection(pooled)  # in step with its server after all: the check passes
    pooled.execute("UNLISTEN *")


@pytest.mark.django_db(transaction=True)
def test_a_connection_never_handed_out_answers_the_empty_query():
    with psycopg.connect(live.test_database_url(), autocommit=True) as fresh:
        assert checkout.needs_ping(fresh)


@pytest.mark.django_db(transaction=True)
def test_the_event_loops_pool_hands_a_quiet_connection_back_out_without_the_empty_query():
    async def scenario() -> tuple[tuple[str, Any], tuple[str, Any]]:
        pool = await aio.pool()
        async with pool.connection() as conn:
            await conn.execute("SELECT 42")
            used = conn.info.backend_pid
        before = _last_query(used)
        for _ in range(pool.max_size):  # the pool hands its connections out in turn: until that one again
            async with pool.connection() as again:
                if again.info.backend_pid == used:
                    break
        else:
            raise AssertionError("the pool never handed the connection out again")
        return before, _last_query(used)

    before, after = run(scenario)
    assert before[0] == "SELECT 42" and after == before
