"""A lost database connection is a 503 the client may retry, never a 500."""

from __future__ import annotations

import threading

import httpx
import psycopg
import pytest
from django import db
from django.conf import settings
from django.db import connection, connections

from queues.apikeys import create_key
from queues.models import Task
from taskforge.http.errors import connection_lost, exception_handler
from taskforge.infra.postgres.base import check_connection
from tests.factories import QueueFactory


@pytest.mark.parametrize("error", [db.OperationalError, db.InterfaceError])
def test_database_errors_are_503_unavailable_with_retry_after(error):
    response = exception_handler(error("terminating connection due to administrator command"), {})
    assert response.status_code == 503
    assert response.data["error"]["code"] == "unavailable"
    assert response["Retry-After"] == "1"
    assert "administrator" not in str(response.data)  # no internals leak


@pytest.mark.django_db(transaction=True)
def test_when_every_pooled_connection_dies_the_next_checkout_gets_a_fresh_one():
    """A Postgres restart kills every pooled connection at once: the next query
    must not wade through the dead ones (with backoff) past the pool's timeout."""
    size = settings.DATABASES["default"]["OPTIONS"]["pool"]["max_size"]
    # This thread holds one connection throughout (whatever earlier tests left open or closed),
    # so the others fill the pool with size - 1 connections of their own.
    connection.ensure_connection()
    opened = threading.Barrier(size - 1)

    def hold_a_connection() -> None:  # fill the pool: every thread takes its own
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            opened.wait(timeout=10)
        connection.close()  # back to the pool, alive

    fill = [threading.Thread(target=hold_a_connection) for _ in range(size - 1)]
    for thread in fill:
        thread.start()
    for thread in fill:
        thread.join()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        (killed,) = cursor.fetchone()
    assert killed >= size - 1
    answers: list[object] = []

    def query() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 42")
                answers.append(cursor.fetchone())
        except db.Error as exc:
            answers.append(exc)
        finally:
            connection.close()

    later = threading.Thread(target=query)
    later.start()
    later.join()
    assert answers == [(42,)]


@pytest.mark.django_db(transaction=True)
def test_the_checkout_check_refuses_a_connection_whose_backend_was_terminated():
    """Handed out a moment before, so no empty query is owed: the terminated backend's goodbye
    on the socket still makes the check send it, and refuse the connection."""
    connection.ensure_connection()  # this thread's own connection does the killing
    pool = connection.pool
    conn = pool.getconn()
    try:
        check_connection(conn)  # alive: no error
        with connection.cursor() as cursor:
            # With a timeout it returns once the backend has gone (its goodbye written).
            cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [conn.info.backend_pid])
        with pytest.raises(psycopg.OperationalError):
            check_connection(conn)
        assert conn.closed  # the pool discards it when it comes back
    finally:
        pool.putconn(conn)
        connection.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_api_process_survives_pg_terminate_backend_of_its_pooled_connections(live_stack):
    """Every connection an API process holds is killed: its next requests still answer 200."""
    _, key = create_key("pgkill", "admin")
    url = live_stack.start_api(workers=1, extra_env={"TASKFORGE_DB_POOL_SIZE": "3"})
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
        for _ in range(5):
            assert http.get("/queues").status_code == 200
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (own_pid,) = cursor.fetchone()
            cursor.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> %s",
                [own_pid],
            )
            (killed,) = cursor.fetchone()
        assert killed >= 1
        statuses = [http.get("/queues").status_code for _ in range(5)]
    assert statuses == [200] * 5


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_single_enqueues_survive_pg_terminate_backend_of_every_connection(live_stack):
    """Single enqueues run on the event loop's own pool (taskforge.infra.postgres.aio): it too replaces
    connections killed while idle, so the enqueues after the kill are all created (201), and durable."""
    QueueFactory(name="pgkill-enqueue")
    _, key = create_key("pgkill-producer", "producer")
    url = live_stack.start_api(workers=1)
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=15) as http:
        before = [http.post("/queues/pgkill-enqueue/tasks", json={"payload": {"n": n}}) for n in range(5)]
        assert [answer.status_code for answer in before] == [201] * 5
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            (killed,) = cursor.fetchone()
        assert killed >= 2  # the loop's pool and Django's, at least one each
        after = [http.post("/queues/pgkill-enqueue/tasks", json={"payload": {"n": n}}) for n in range(5, 10)]
    assert [answer.status_code for answer in after] == [201] * 5
    created = {answer.json()["id"] for answer in before + after}
    assert set(map(str, Task.objects.filter(queue__name="pgkill-enqueue").values_list("id", flat=True))) == created


@pytest.mark.django_db(transaction=True)
def test_any_database_error_that_broke_the_connection_is_a_503():
    """Through PgBouncer a backend killed as a transaction begins surfaces as psycopg's
    InternalError ("received 2 results"); the call may be repeated, so it is a 503."""
    odd = db.InternalError("received 2 results from command 'BEGIN'")
    connection.ensure_connection()
    assert connection_lost(odd) is odd  # a healthy connection: a real bug, a 500
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (own_pid,) = cursor.fetchone()
    other = connections.create_connection("default")  # a second connection of its own
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [own_pid])
    finally:
        other.close()
    with pytest.raises(db.OperationalError), connection.cursor() as cursor:
        cursor.execute("SELECT 1")  # the terminated backend breaks the connection
    lost = connection_lost(odd)
    assert isinstance(lost, db.OperationalError) and lost.__cause__ is odd
    assert exception_handler(lost, {}).status_code == 503
    connection.close()


def _raised_from(cause: Exception) -> db.InternalError:
    error = db.InternalError(str(cause))
    error.__cause__ = cause
    return error


@pytest.mark.django_db(transaction=True)
def test_a_protocol_error_of_the_driver_is_a_503_and_the_connection_is_dropped():
    """psycopg's own InternalError (no SQLSTATE: no server said it) means the connection is out of step."""
    connection.ensure_connection()
    raw = connection.connection
    lost = connection_lost(_raised_from(psycopg.errors.InternalError("received 2 results from command 'BEGIN'")))
    assert isinstance(lost, db.OperationalError)
    assert raw.closed  # not handed out again
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_an_internal_error_the_server_reported_stays_a_500():
    connection.ensure_connection()
    server_said = _raised_from(psycopg.errors.lookup("XX000")("could not read block"))
    assert connection_lost(server_said) is server_said
    assert exception_handler(server_said, {}).status_code == 500
    assert not connection.connection.closed
