"""Vacuum the task tables early: their rows churn through every status, and
dead tuples in the ready index slow every claim (see docs/performance.md)."""

from django.db import migrations

TUNE = """
ALTER TABLE tf_task SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02,
                         autovacuum_vacuum_cost_delay = 1, fillfactor = 85);
ALTER TABLE tf_task_event SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
"""
UNTUNE = """
ALTER TABLE tf_task RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor,
                           autovacuum_vacuum_cost_delay, fillfactor);
ALTER TABLE tf_task_event RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor);
"""


class Migration(migrations.Migration):
    dependencies = [("queues", "0001_initial")]
    operations = [migrations.RunSQL(TUNE, UNTUNE)]
