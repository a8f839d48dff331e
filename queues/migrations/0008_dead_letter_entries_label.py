"""The admin says "2 dead-letter entries", not "2 dead-letter queue" (options only: no SQL)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('queues', '0007_schedule'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='deadlettertask',
            options={'verbose_name': 'dead-letter entry', 'verbose_name_plural': 'dead-letter entries'},
        ),
    ]
