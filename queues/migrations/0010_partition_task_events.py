"""The history by time: ``tf_task_event`` becomes range-partitioned by day on ``at``.

Retention then drops whole days (``queues.partitions``) instead of deleting
rows. The conversion is online: nothing is copied, and the only lock that
stops writes is held for one transaction that changes the catalog only.

1. ``T`` is the start of the day after tomorrow (UTC; later if some event is
   dated later): the old table becomes the partition of everything before it.
2. ``CHECK (at < T)`` is added NOT VALID (a moment's lock, no scan), then
   validated: a scan under a lock that lets reads and writes go on. Events
   are written with ``now()``, so the ones written meanwhile satisfy it.
3. A unique index on ``(id, at)`` is built CONCURRENTLY: the primary key of a
   partitioned table must contain the partition key.
4. One transaction, holding ACCESS EXCLUSIVE on the old table (each attempt
   waits at most ``SWAP_LOCK_TIMEOUT`` for it, so writers queue behind it no
   longer than that): rename the table and its indexes, make the new index
   a unique constraint, hand its id sequence's position to a new partitioned
   ``tf_task_event`` with the same columns and index names, and attach the
   old table FROM (MINVALUE) TO (T): the validated CHECK proves the bound and
   its indexes match the parent's, so nothing is scanned or built.
5. The daily partitions from T through four days ahead, and the open-ended one
   after them, are attached (a lock that lets writes go on).

The model's state does not change: ``TaskEvent.id`` stays the ORM's primary
key (every id still comes from one sequence); the table's is ``(id, at)``.
Reversing copies every row into a plain table under an exclusive lock: it is
not online.
"""

import logging
import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import OperationalError, migrations, transaction

logger = logging.getLogger("taskforge.migrations")

# As queues.partitions.layout keeps them: daily partitions through four days after today.
DAYS_AHEAD = 4
SWAP_LOCK_TIMEOUT = "2s"
SWAP_ATTEMPTS = 30
BOUND = "tf_task_event_partition_bound"
NEW_KEY_INDEX = "tf_task_event_id_at"
TUNED = "autovacuum_analyze_scale_factor = 0.05"


def _day_start(moment):
    utc = moment.astimezone(UTC)
    return datetime(utc.year, utc.month, utc.day, tzinfo=UTC)


def _literal(moment):
    return f"'{moment.astimezone(UTC).isoformat()}'"


def _fetch_one(cursor, sql):
    cursor.execute(sql)
    return cursor.fetchone()


def _with_lock_retries(connection, step):
    """Run ``step`` in a transaction whose lock waits are capped; try again on a lock timeout."""
    for attempt in range(1, SWAP_ATTEMPTS + 1):
        try:
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{SWAP_LOCK_TIMEOUT}'")
                return step(cursor)
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != "55P03" or attempt == SWAP_ATTEMPTS:
                raise
            logger.warning("tf_task_event busy (attempt %d): waiting to take its lock again", attempt)
            time.sleep(1)
    raise AssertionError("unreachable")


def partition(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        (kind,) = _fetch_one(cursor, "SELECT relkind FROM pg_class WHERE oid = 'tf_task_event'::regclass")
    if kind == "p":
        # Swapped by an earlier run that stopped before step 5 ended: the watchdog's first
        # round creates whatever days ahead are missing.
        return
    # 1. T.
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = 0")  # a scan of every row, under no lock that blocks
        now, latest = _fetch_one(cursor, "SELECT now(), (SELECT max(at) FROM tf_task_event)")
    bound = _day_start(now) + timedelta(days=2)
    if latest is not None and latest >= bound:
        bound = _day_start(latest) + timedelta(days=1)
    legacy = f"tf_task_event_before_{bound:%Y%m%d}"

    # 2. The bound, proved without a long lock.
    _with_lock_retries(
        connection,
        lambda cursor: cursor.execute(
            # Dropped first: an earlier run that stopped may have added it, with another T.
            f"ALTER TABLE tf_task_event DROP CONSTRAINT IF EXISTS {BOUND},"
            f" ADD CONSTRAINT {BOUND} CHECK (at < {_literal(bound)}) NOT VALID"
        ),
    )
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = 0")
        cursor.execute(f"ALTER TABLE tf_task_event VALIDATE CONSTRAINT {BOUND}")

    # 3. The new primary key's index, built beside the writes (a build interrupted before leaves
    # an invalid index behind: it is dropped and built again).
    # A concurrent build cannot run in a transaction, so no SET LOCAL lifts the statement timeout
    # for it. Behind PgBouncer a session SET could outlive the statement on a pooled server
    # connection: there the role's statement_timeout bounds the build (docs/operations.md).
    unbounded = not settings.TASKFORGE_DB_PGBOUNCER
    with connection.cursor() as cursor:
        cursor.execute("SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [NEW_KEY_INDEX])
        found = cursor.fetchone()
        if unbounded:
            cursor.execute("SET statement_timeout = 0")
        try:
            if found and found[0]:
                cursor.execute(f"DROP INDEX CONCURRENTLY {NEW_KEY_INDEX}")
            cursor.execute(f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {NEW_KEY_INDEX} ON tf_task_event (id, at)")
        finally:
            if unbounded:
                cursor.execute("RESET statement_timeout")

    # 4. The swap.
    def swap(cursor):
        cursor.execute("LOCK TABLE tf_task_event IN ACCESS EXCLUSIVE MODE")
        locked = time.perf_counter()
        (sequence,) = _fetch_one(cursor, "SELECT pg_get_serial_sequence('tf_task_event', 'id')")
        (next_id,) = _fetch_one(
            cursor,
            f"SELECT greatest((SELECT last_value + is_called::int FROM {sequence}),"
            " (SELECT coalesce(max(id), 0) + 1 FROM tf_task_event))",
        )
        statements = [
            f"ALTER TABLE tf_task_event RENAME TO {legacy}",
            f"ALTER INDEX tf_event_task RENAME TO {legacy}_task",
            f"ALTER INDEX tf_event_queue_at RENAME TO {legacy}_queue_at",
            # Its own primary key on id stays (dropping it would add the index's removal to the
            # commit); the new index becomes the constraint the parent's primary key attaches to.
            f"ALTER TABLE {legacy} RENAME CONSTRAINT tf_task_event_pkey TO {legacy}_pkey",
            f"ALTER TABLE {legacy} ADD CONSTRAINT {legacy}_id_at UNIQUE USING INDEX {NEW_KEY_INDEX}",
            f"ALTER TABLE {legacy} ALTER COLUMN id DROP IDENTITY",
            # LIKE copies the columns in their order with NOT NULL, not the CHECK.
            f"CREATE TABLE tf_task_event (LIKE {legacy}) PARTITION BY RANGE (at)",
            f"ALTER TABLE tf_task_event ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (START WITH {next_id})",
            "ALTER TABLE tf_task_event ADD CONSTRAINT tf_task_event_pkey PRIMARY KEY (id, at)",
            "CREATE INDEX tf_event_task ON tf_task_event (task_id, at)",
            "CREATE INDEX tf_event_queue_at ON tf_task_event (queue_id, at)",
            f"ALTER TABLE tf_task_event ATTACH PARTITION {legacy} FOR VALUES FROM (MINVALUE) TO ({_literal(bound)})",
        ]
        for statement in statements:
            cursor.execute(statement)
        return locked

    locked = _with_lock_retries(connection, swap)
    held_ms = (time.perf_counter() - locked) * 1000
    logger.info(
        "tf_task_event partitioned by day; the swap held its lock for %.1f ms",
        held_ms,
        extra={"event": "migration.partitioned", "lock_held_ms": round(held_ms, 1)},
    )

    # 5. The days ahead, attached under a lock that lets writes go on (no event is dated after
    # the bound yet; should this step fail, the watchdog's first round creates them).
    open_from = max(bound, _day_start(now) + timedelta(days=DAYS_AHEAD + 1))
    partitions = []
    day = bound
    while day < open_from:
        partitions.append((f"tf_task_event_{day:%Y%m%d}", _literal(day), _literal(day + timedelta(days=1))))
        day += timedelta(days=1)
    partitions.append((f"tf_task_event_from_{open_from:%Y%m%d}", _literal(open_from), "MAXVALUE"))

    def days_ahead(cursor):
        for name, lower, upper in partitions:
            cursor.execute(f"CREATE TABLE {name} (LIKE tf_task_event) WITH ({TUNED})")
            cursor.execute(f"ALTER TABLE tf_task_event ATTACH PARTITION {name} FOR VALUES FROM ({lower}) TO ({upper})")

    _with_lock_retries(connection, days_ahead)


def unpartition(apps, schema_editor):
    connection = schema_editor.connection
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute("LOCK TABLE tf_task_event IN ACCESS EXCLUSIVE MODE")
        (next_id,) = _fetch_one(cursor, "SELECT coalesce(max(id), 0) + 1 FROM tf_task_event")
        for statement in [
            "CREATE TABLE tf_task_event_unpartitioned (LIKE tf_task_event)"
            " WITH (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05)",
            "INSERT INTO tf_task_event_unpartitioned SELECT * FROM tf_task_event",
            "DROP TABLE tf_task_event",
            "ALTER TABLE tf_task_event_unpartitioned RENAME TO tf_task_event",
            f"ALTER TABLE tf_task_event ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (START WITH {next_id})",
            "ALTER TABLE tf_task_event ADD CONSTRAINT tf_task_event_pkey PRIMARY KEY (id)",
            "CREATE INDEX tf_event_task ON tf_task_event (task_id, at)",
            "CREATE INDEX tf_event_queue_at ON tf_task_event (queue_id, at)",
        ]:
            cursor.execute(statement)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("queues", "0009_queue_push"),
    ]

    operations = [
        # The table changes shape, the model does not: no state operation.
        migrations.RunPython(partition, unpartition, atomic=False),
    ]
