"""Worker controls: an operator asks a worker to quiet (claim nothing) or stop (finish, then exit).

Both columns are nullable without a default: Postgres adds them without
rewriting tf_worker.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workers", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="control",
            field=models.CharField(
                blank=True,
                choices=[
                    ("quiet", "quiet: claim nothing, finish what it holds"),
                    ("stop", "stop: finish what it holds, then exit"),
                ],
                max_length=8,
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="worker",
            name="control_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
