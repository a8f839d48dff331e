"""Periodic schedules (API v2): ``tf_schedule``.

A new table only; ``tf_schedule_due`` is the loop's partial index on ``next_run_at``.
"""

import django.core.validators
import django.db.models.deletion
import uuid
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('queues', '0006_queue_history_samples'),
    ]

    operations = [
        migrations.CreateModel(
            name='Schedule',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=64, unique=True, validators=[django.core.validators.RegexValidator('^[A-Za-z0-9_-]{1,64}$', "Schedule names are 1-64 letters, digits, '-' or '_'.")])),
                ('cron', models.CharField(blank=True, max_length=200, null=True)),
                ('every_seconds', models.PositiveIntegerField(blank=True, null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(86400)])),
                ('timezone', models.CharField(default='UTC', max_length=64)),
                ('payload', models.JSONField(blank=True, default=dict)),
                ('kind', models.CharField(blank=True, max_length=128, null=True, validators=[django.core.validators.RegexValidator('^[A-Za-z0-9._:-]{1,128}$', "A kind is 1-128 letters, digits, '.', '_', '-' or ':'.")])),
                ('priority', models.PositiveSmallIntegerField(default=5, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(10)])),
                ('paused', models.BooleanField(default=False)),
                ('catch_up', models.CharField(choices=[('latest', 'Latest'), ('none', 'None'), ('all', 'All')], default='latest', max_length=8)),
                ('next_run_at', models.DateTimeField(blank=True, editable=False, null=True)),
                ('last_run_at', models.DateTimeField(blank=True, editable=False, null=True)),
                ('last_task_id', models.UUIDField(blank=True, editable=False, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('queue', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='schedules', to='queues.queue')),
            ],
            options={
                'db_table': 'tf_schedule',
                'ordering': ['name'],
                'indexes': [models.Index(condition=models.Q(('next_run_at__isnull', False)), fields=['next_run_at'], name='tf_schedule_due')],
                'constraints': [models.CheckConstraint(condition=models.Q(models.Q(('cron__isnull', False), ('every_seconds__isnull', True)), models.Q(('cron__isnull', True), ('every_seconds__isnull', False)), _connector='OR'), name='tf_schedule_cron_xor_every'), models.CheckConstraint(condition=models.Q(('every_seconds__isnull', True), models.Q(('every_seconds__gte', 1), ('every_seconds__lte', 86400)), _connector='OR'), name='tf_schedule_every_range'), models.CheckConstraint(condition=models.Q(('priority__gte', 1), ('priority__lte', 10)), name='tf_schedule_priority_range'), models.CheckConstraint(condition=models.Q(('catch_up__in', ['latest', 'none', 'all'])), name='tf_schedule_catch_up')],
            },
        ),
    ]
