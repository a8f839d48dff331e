"""Task kinds and execution time limits (API v2).

* ``tf_queue.timeout_seconds`` and ``tf_task.timeout_seconds``: nullable, so
  adding them rewrites no row.
* ``tf_task.kind`` with the partial index ``tf_task_kind_listing`` that serves
  ``?kind=`` listings; only typed tasks are in it. Built CONCURRENTLY (hence a
  non-atomic migration) so a deploy never blocks writes.
"""

import django.core.validators
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("queues", "0002_autovacuum"),
    ]

    operations = [
        migrations.AddField(
            model_name="queue",
            name="timeout_seconds",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Execution time limit of one attempt, in seconds; empty means no limit.",
                null=True,
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(86400),
                ],
            ),
        ),
        migrations.AddField(
            model_name="task",
            name="kind",
            field=models.CharField(
                blank=True,
                max_length=128,
                null=True,
                validators=[
                    django.core.validators.RegexValidator(
                        "^[A-Za-z0-9._:-]{1,128}$", "A kind is 1-128 letters, digits, '.', '_', '-' or ':'."
                    )
                ],
            ),
        ),
        migrations.AddField(
            model_name="task",
            name="timeout_seconds",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        AddIndexConcurrently(
            model_name="task",
            index=models.Index(
                condition=models.Q(("kind__isnull", False)),
                fields=["queue", "kind", "-created_at", "-id"],
                name="tf_task_kind_listing",
            ),
        ),
    ]
