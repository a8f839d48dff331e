"""Indexes on tf_task that the dashboard's changelists need at a million rows.

* ``tf_task_created`` (created_at DESC, id DESC): the task inspector's default
  order without a queue filter (``tf_task_listing`` leads with the queue), and
  its created-at range filter. Without it every unfiltered page view sorts the
  whole table (about 1.5 s at 1M rows here).
* ``tf_task_dead`` (id) WHERE status = 'dead': "dead now" in the dead-letter
  browser joins tf_task on status; this partial index holds only the dead rows,
  so it costs a write only when a task dies or leaves the DLQ.

They live here rather than in ``queues``' models because only the dashboard
reads through them. Built CONCURRENTLY so a deploy never blocks writes.
"""

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("queues", "0002_autovacuum")]

    operations = [
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS tf_task_created ON tf_task (created_at DESC, id DESC)",
            "DROP INDEX CONCURRENTLY IF EXISTS tf_task_created",
        ),
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS tf_task_dead ON tf_task (id) WHERE status = 'dead'",
            "DROP INDEX CONCURRENTLY IF EXISTS tf_task_dead",
        ),
    ]
