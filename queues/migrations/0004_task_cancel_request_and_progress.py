"""Cancelling running tasks and reporting progress (API v2).

``tf_task.cancel_requested`` has a constant database default, so Postgres adds
it without rewriting the table; ``tf_task.progress`` is nullable.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("queues", "0003_task_kind_and_timeout"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="cancel_requested",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddField(
            model_name="task",
            name="progress",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
