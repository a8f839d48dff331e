"""Push queues (API v2): a queue's delivery target and its signing secrets.

Every column is nullable, so Postgres adds them without rewriting the table.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("queues", "0008_dead_letter_entries_label"),
    ]

    operations = [
        migrations.AddField(
            model_name="queue",
            name="push",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="queue",
            name="push_secret",
            field=models.CharField(blank=True, editable=False, max_length=128, null=True),
        ),
        migrations.AddField(
            model_name="queue",
            name="push_previous_secret",
            field=models.CharField(blank=True, editable=False, max_length=128, null=True),
        ),
        migrations.AddField(
            model_name="queue",
            name="push_secret_rotated_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]
