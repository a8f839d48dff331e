"""Queue history: one row of cumulative counters per queue per minute (tf_queue_sample)."""

import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('queues', '0005_task_payload_search'),
    ]

    operations = [
        migrations.CreateModel(
            name='QueueSample',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('queue_name', models.CharField(max_length=64)),
                ('minute', models.DateTimeField()),
                ('taken_at', models.DateTimeField()),
                ('enqueued', models.BigIntegerField()),
                ('done', models.BigIntegerField()),
                ('failed', models.BigIntegerField()),
                ('dead', models.BigIntegerField()),
                ('expired', models.BigIntegerField()),
                ('cancelled', models.BigIntegerField()),
                ('run_buckets', django.contrib.postgres.fields.ArrayField(base_field=models.BigIntegerField())),
                ('wait_buckets', django.contrib.postgres.fields.ArrayField(base_field=models.BigIntegerField())),
            ],
            options={
                'db_table': 'tf_queue_sample',
                'indexes': [models.Index(fields=['minute'], name='tf_queue_sample_pruning')],
                'constraints': [models.UniqueConstraint(fields=('queue_name', 'minute'), name='tf_queue_sample_minute')],
            },
        ),
    ]
