"""Payload search: a GIN index (jsonb_path_ops) on tf_task.payload for ``@>`` containment.

Built concurrently, so an upgrade does not block enqueues and claims while a
large tf_task is indexed (a concurrent build cannot run in a transaction).
"""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("queues", "0004_task_cancel_request_and_progress"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="task",
            index=GinIndex(fields=["payload"], name="tf_task_payload", opclasses=["jsonb_path_ops"]),
        ),
    ]
