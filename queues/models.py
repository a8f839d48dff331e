"""Queues, tasks, their history and the dead-letter queue.

Nothing here writes ``Task.status``: every move goes through
``queues.lifecycle``. The allowed edges are listed next to the states so the
state machine is written down once.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q


def _default_retry_base_ms() -> int:
    return settings.TASKFORGE_RETRY_BASE_MS


def _default_retry_max_delay_ms() -> int:
    return settings.TASKFORGE_RETRY_MAX_DELAY_MS


queue_name_validator = RegexValidator(r"^[A-Za-z0-9_-]{1,64}$", "Queue names are 1-64 letters, digits, '-' or '_'.")
# Schedules follow the queue-name rules: they appear in paths and in their tasks' idempotency keys.
schedule_name_validator = RegexValidator(
    r"^[A-Za-z0-9_-]{1,64}$", "Schedule names are 1-64 letters, digits, '-' or '_'."
)
TASK_KIND_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
task_kind_validator = RegexValidator(TASK_KIND_PATTERN, "A kind is 1-128 letters, digits, '.', '_', '-' or ':'.")


class Queue(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=64, unique=True, validators=[queue_name_validator])
    max_retries = models.PositiveSmallIntegerField(default=3, validators=[MaxValueValidator(25)])
    rate_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100_000)],
        help_text="Tasks dispatched per second; empty means unlimited.",
    )
    rate_burst = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100_000)],
        help_text="Token bucket size; empty means equal to the rate limit.",
    )
    paused = models.BooleanField(default=False)
    retry_base_ms = models.PositiveIntegerField(
        default=_default_retry_base_ms, validators=[MinValueValidator(1), MaxValueValidator(3_600_000)]
    )
    retry_max_delay_ms = models.BigIntegerField(
        default=_default_retry_max_delay_ms,
        validators=[MinValueValidator(1), MaxValueValidator(30 * 86_400_000)],
    )
    # The execution time limit of one attempt, counted from its claim; copied onto each task at enqueue.
    timeout_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(86_400)],
        help_text="Execution time limit of one attempt, in seconds; empty means no limit.",
    )
    # Delivery over HTTP by the pusher, or null (workers pull): {"url", "timeout_seconds",
    # "max_concurrent", "headers"}, validated by the API (queues.api.inputs.PushSerializer).
    push = models.JSONField(null=True, blank=True, editable=False)
    # The HMAC key of a push queue's signatures, and the one it replaced, which still signs
    # until TASKFORGE_PUSH_SECRET_GRACE_SECONDS after push_secret_rotated_at (queues.push.secrets).
    # Kept readable, not hashed: the pusher needs the key itself to sign.
    push_secret = models.CharField(max_length=128, null=True, blank=True, editable=False)
    push_previous_secret = models.CharField(max_length=128, null=True, blank=True, editable=False)
    push_secret_rotated_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "tf_queue"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(retry_max_delay_ms__gte=models.F("retry_base_ms")),
                name="tf_queue_max_delay_gte_base",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def effective_burst(self) -> int | None:
        if self.rate_limit is None:
            return None
        return self.rate_burst or self.rate_limit


class Status(models.TextChoices):
    # pending: waiting to be claimed (scheduled_at may lie in the future).
    #   In: enqueue, promote (from retry), replay (from dead). Out: claim, cancel/purge.
    PENDING = "pending"
    # claimed: leased to a worker that has not sent a heartbeat yet.
    CLAIMED = "claimed"
    # executing: the worker's first heartbeat arrived. Out: ack, nack, expiry.
    #   A claimed or executing task may carry cancel_requested: then a nack or an
    #   expiry makes it cancelled (no retry, no DLQ); an ack still makes it done.
    EXECUTING = "executing"
    # done: acked. Terminal; pruned after the retention period.
    DONE = "done"
    # retry: a failed attempt with attempts left; the scheduler promotes it at scheduled_at.
    RETRY = "retry"
    # dead: out of attempts (or nacked with retry=false); listed in the DLQ until replayed.
    DEAD = "dead"
    # cancelled: by a producer or a purge, or a running task whose cancel was requested. Terminal; pruned like done.
    CANCELLED = "cancelled"


ALLOWED_TRANSITIONS: dict[str, set[str]] = {
    Status.PENDING: {Status.CLAIMED, Status.CANCELLED},
    Status.CLAIMED: {Status.EXECUTING, Status.DONE, Status.RETRY, Status.DEAD, Status.CANCELLED},
    Status.EXECUTING: {Status.DONE, Status.RETRY, Status.DEAD, Status.CANCELLED},
    Status.RETRY: {Status.PENDING, Status.CANCELLED},
    Status.DEAD: {Status.PENDING},
    Status.DONE: set(),
    Status.CANCELLED: set(),
}
LEASED = (Status.CLAIMED, Status.EXECUTING)
FINISHED = (Status.DONE, Status.CANCELLED)


class Task(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # db_constraint on: a queue is only deleted after its tasks (see lifecycle.delete_queue).
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="tasks", db_index=False)
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    priority = models.PositiveSmallIntegerField(default=5)
    scheduled_at = models.DateTimeField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    # When the task entered its current status: gives duration_ms in transition logs.
    status_changed_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    lease_token = models.CharField(max_length=64, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    max_retries = models.PositiveSmallIntegerField(default=3)
    last_error = models.TextField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    # What the task is (e.g. "emails.send_welcome"), set by the producer; null when not given.
    kind = models.CharField(max_length=128, null=True, blank=True, validators=[task_kind_validator])
    # The execution time limit of each attempt (the enqueue body's, else the queue's at enqueue time).
    timeout_seconds = models.PositiveIntegerField(null=True, blank=True)
    # A producer asked to stop this running task: heartbeats say so, and a nack or expiry cancels it.
    cancel_requested = models.BooleanField(default=False, db_default=False)
    # The latest progress object a heartbeat sent (null before any).
    progress = models.JSONField(null=True, blank=True)
    # A request has waited for this task's result (GET ...?wait_seconds=N): the
    # move that settles it rings its result bell. Unset, nobody is told, which
    # saves every settling move a Redis round trip (queues.lifecycle.notify).
    awaited = models.BooleanField(default=False, db_default=False, editable=False)
    # sha256 of the enqueue body, so a reused idempotency key with another body is a 409.
    request_fingerprint = models.CharField(max_length=64, null=True, blank=True, editable=False)

    class Meta:
        db_table = "tf_task"
        constraints = [
            models.CheckConstraint(condition=Q(status__in=Status.values), name="tf_task_status_valid"),
            models.CheckConstraint(condition=Q(priority__gte=1, priority__lte=10), name="tf_task_priority_range"),
            models.UniqueConstraint(
                fields=["queue", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="tf_task_idempotency_key_per_queue",
            ),
        ]
        indexes = [
            # The claim path: only pending rows are in it, so millions of
            # finished tasks never slow a claim down.
            models.Index(
                fields=["queue", "priority", "scheduled_at"],
                condition=Q(status="pending"),
                name="tf_task_ready",
            ),
            # The PRD's general index: depth by status, filtered listings.
            models.Index(fields=["queue", "status", "priority", "scheduled_at"], name="tf_task_queue_status"),
            # The watchdog's scan for expired leases.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status__in=["claimed", "executing"]),
                name="tf_task_leased",
            ),
            # The scheduler's scan for due retries.
            models.Index(fields=["scheduled_at"], condition=Q(status="retry"), name="tf_task_retry_due"),
            # Retention pruning and completion rates.
            models.Index(
                fields=["finished_at"],
                condition=Q(status__in=["done", "cancelled"]),
                name="tf_task_finished",
            ),
            # Task listing, newest first, per queue.
            models.Index(fields=["queue", "-created_at", "-id"], name="tf_task_listing"),
            models.Index(
                fields=["claimed_by"],
                condition=Q(status__in=["claimed", "executing"]),
                name="tf_task_held_by",
            ),
            # Payload search (?payload_contains=, the admin's key=value search): jsonb containment.
            # jsonb_path_ops indexes only what @> needs, so it is a fraction of a full jsonb GIN index.
            GinIndex(fields=["payload"], opclasses=["jsonb_path_ops"], name="tf_task_payload"),
            # Task listing filtered on kind (?kind=, the admin's kind filter); untyped tasks are not in it.
            models.Index(
                fields=["queue", "kind", "-created_at", "-id"],
                condition=Q(kind__isnull=False),
                name="tf_task_kind_listing",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"


class QueueSample(models.Model):
    """A queue's cumulative counters (``queues.telemetry.counters``) as they stood at the start of one minute.

    The history loop (``queues.loops.history``) takes one per queue per minute,
    whichever process is first; a minute's figures are the difference between
    its sample and the next (``queues.telemetry.history``). Keyed by queue name,
    as the counters are, so the history outlives nothing but its retention.
    """

    id = models.BigAutoField(primary_key=True)
    queue_name = models.CharField(max_length=64)
    minute = models.DateTimeField()
    taken_at = models.DateTimeField()
    enqueued = models.BigIntegerField()
    done = models.BigIntegerField()
    failed = models.BigIntegerField()
    dead = models.BigIntegerField()
    expired = models.BigIntegerField()
    cancelled = models.BigIntegerField()
    # Cumulative counts per bucket of counters.BUCKETS (claim to outcome; scheduled_at to claim).
    run_buckets = ArrayField(models.BigIntegerField())
    wait_buckets = ArrayField(models.BigIntegerField())

    class Meta:
        db_table = "tf_queue_sample"
        constraints = [
            # One sample per queue and minute, however many loops run; also the range read of one queue.
            models.UniqueConstraint(fields=["queue_name", "minute"], name="tf_queue_sample_minute"),
        ]
        indexes = [models.Index(fields=["minute"], name="tf_queue_sample_pruning")]

    def __str__(self) -> str:
        return f"{self.queue_name} at {self.minute}"


class TaskEvent(models.Model):
    """One status transition (kind ``transition``) or heartbeat of a task.

    ``tf_task_event`` is partitioned by day on ``at`` (migration 0010,
    ``queues.partitions``): retention drops whole days. Its primary key is
    therefore ``(id, at)``; the ORM keeps ``id`` alone, which stays unique
    because every id comes from the one sequence of the partitioned table.
    """

    class Kind(models.TextChoices):
        TRANSITION = "transition"
        HEARTBEAT = "heartbeat"

    id = models.BigAutoField(primary_key=True)
    # No database FK: events are written in the same statement as the move, and they
    # outlive a pruned task until their day's partition is dropped.
    task = models.ForeignKey(
        Task, on_delete=models.DO_NOTHING, db_constraint=False, related_name="events", db_index=False
    )
    queue = models.ForeignKey(Queue, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+", db_index=False)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TRANSITION)
    at = models.DateTimeField()
    from_status = models.CharField(max_length=16, null=True, blank=True)
    to_status = models.CharField(max_length=16)
    worker_id = models.CharField(max_length=200, null=True, blank=True)
    detail = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "tf_task_event"
        indexes = [
            models.Index(fields=["task", "at"], name="tf_event_task"),
            # Rates over the last minute (stats, dashboard).
            models.Index(fields=["queue", "at"], name="tf_event_queue_at"),
        ]

    def __str__(self) -> str:
        return f"{self.task_id}: {self.from_status} -> {self.to_status}"


class DeadLetterTask(models.Model):
    """The DLQ entry of a task that died; its id is the task's id."""

    task = models.OneToOneField(
        Task, on_delete=models.DO_NOTHING, primary_key=True, db_column="id", related_name="dead_letter"
    )
    queue = models.ForeignKey(Queue, on_delete=models.DO_NOTHING, related_name="dead_letters", db_index=False)
    payload = models.JSONField()
    last_error = models.TextField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField()
    died_at = models.DateTimeField()
    replayed_at = models.DateTimeField(null=True, blank=True)
    replay_count = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "tf_dead_letter"
        verbose_name = "dead-letter entry"
        verbose_name_plural = "dead-letter entries"  # "2 dead-letter entries", not "2 dead-letter queue"
        indexes = [models.Index(fields=["queue", "-died_at"], name="tf_dlq_queue_died")]

    def __str__(self) -> str:
        return str(self.task_id)


class ApiKey(models.Model):
    class Role(models.TextChoices):
        ADMIN = "admin"
        PRODUCER = "producer"
        WORKER = "worker"

    name = models.CharField(max_length=100, unique=True)
    # The first characters of the raw key, shown so operators can tell keys apart.
    prefix = models.CharField(max_length=16, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "tf_api_key"
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.role})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class Schedule(models.Model):
    """A periodic schedule: at each fire time, one task into ``queue`` (see ``queues.schedules``).

    ``next_run_at`` comes from ``queues.schedules`` only (``planning`` on create,
    when the timing or ``paused`` changes; the loop after each fire); null while paused.
    """

    class CatchUp(models.TextChoices):
        # One task for the latest fire time missed while no scheduler ran.
        LATEST = "latest"
        NONE = "none"
        # One task per missed fire time, at most 100.
        ALL = "all"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=64, unique=True, validators=[schedule_name_validator])
    # A queue's schedules go with it (DELETE /queues/{name} deletes them).
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="schedules")
    cron = models.CharField(max_length=200, null=True, blank=True)
    every_seconds = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(86_400)]
    )
    timezone = models.CharField(max_length=64, default="UTC")
    payload = models.JSONField(default=dict, blank=True)
    kind = models.CharField(max_length=128, null=True, blank=True, validators=[task_kind_validator])
    priority = models.PositiveSmallIntegerField(default=5, validators=[MinValueValidator(1), MaxValueValidator(10)])
    paused = models.BooleanField(default=False)
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.LATEST)
    next_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    # No foreign key: finished tasks are pruned, the schedule still names its last one.
    last_task_id = models.UUIDField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "tf_schedule"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(cron__isnull=False, every_seconds__isnull=True)
                | Q(cron__isnull=True, every_seconds__isnull=False),
                name="tf_schedule_cron_xor_every",
            ),
            models.CheckConstraint(
                condition=Q(every_seconds__isnull=True) | Q(every_seconds__gte=1, every_seconds__lte=86_400),
                name="tf_schedule_every_range",
            ),
            models.CheckConstraint(condition=Q(priority__gte=1, priority__lte=10), name="tf_schedule_priority_range"),
            models.CheckConstraint(condition=Q(catch_up__in=["latest", "none", "all"]), name="tf_schedule_catch_up"),
        ]
        indexes = [
            # The loop's scan for due schedules; paused ones (next_run_at null) are not in it.
            models.Index(fields=["next_run_at"], condition=Q(next_run_at__isnull=False), name="tf_schedule_due"),
        ]

    def __str__(self) -> str:
        return self.name
