"""Result bells only for awaited tasks.

``tf_task.awaited`` has a constant database default, so Postgres adds it
without rewriting the table.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("queues", "0010_partition_task_events"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="awaited",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
    ]
