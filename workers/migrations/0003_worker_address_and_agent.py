"""Where a worker runs and what it is (address and User-Agent of its latest call), for the workers page."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('workers', '0002_worker_control'),
    ]

    operations = [
        migrations.AddField(
            model_name='worker',
            name='address',
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.AddField(
            model_name='worker',
            name='agent',
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
    ]
