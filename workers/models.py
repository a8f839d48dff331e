"""The worker registry: who has been seen, and when.

Workers are external processes; this is what ``GET /workers`` and the
dashboard know of them. Task ownership itself lives on ``Task.claimed_by``.
"""

from __future__ import annotations

from django.db import models


class Worker(models.Model):
    worker_id = models.CharField(max_length=200, primary_key=True)
    last_seen_at = models.DateTimeField()
    last_claim_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "tf_worker"
        indexes = [models.Index(fields=["-last_seen_at"], name="tf_worker_seen")]

    def __str__(self) -> str:
        return self.worker_id
