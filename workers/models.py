"""The worker registry: who has been seen, and when.

Workers are external processes; this is what ``GET /workers`` and the
dashboard know of them. Task ownership itself lives on ``Task.claimed_by``.
"""

from __future__ import annotations

from django.db import models


class Control(models.TextChoices):
    """What an operator asked a worker to do (``workers.controls``); none: work as usual."""

    QUIET = "quiet", "quiet: claim nothing, finish what it holds"
    STOP = "stop", "stop: finish what it holds, then exit"


class Worker(models.Model):
    worker_id = models.CharField(max_length=200, primary_key=True)
    last_seen_at = models.DateTimeField()
    last_claim_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    control = models.CharField(max_length=8, choices=Control.choices, null=True, blank=True)
    # Of its latest call (at most a second old): where it runs and what it is (its User-Agent).
    address = models.CharField(max_length=64, null=True, blank=True)
    agent = models.CharField(max_length=200, null=True, blank=True)
    control_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "tf_worker"
        indexes = [models.Index(fields=["-last_seen_at"], name="tf_worker_seen")]

    def __str__(self) -> str:
        return self.worker_id
