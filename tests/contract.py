"""The contract's object shapes (API.md), written once for the unit and integration tests.

Kept apart from ``queues.api.outputs`` on purpose: the tests compare the code
against the contract, so the contract's field lists must not come from the code.
"""

#: The task object of API.md, in its order.
TASK_FIELDS = (
    "id",
    "queue",
    "payload",
    "status",
    "priority",
    "scheduled_at",
    "created_at",
    "updated_at",
    "claimed_at",
    "claimed_by",
    "heartbeat_at",
    "attempts",
    "max_retries",
    "last_error",
    "result",
    "finished_at",
    "idempotency_key",
    # Additions (v2)
    "kind",
    "timeout_seconds",
    "cancel_requested",
    "progress",
)

#: The queue object of API.md (queues are addressed by name: no id).
QUEUE_FIELDS = (
    "name",
    "max_retries",
    "rate_limit",
    "rate_burst",
    "paused",
    "retry_base_ms",
    "retry_max_delay_ms",
    # Additions (v2)
    "timeout_seconds",
    "push",
    "created_at",
    "updated_at",
)

#: The schedule object of API.md (Additions v2: periodic schedules), in its order.
SCHEDULE_FIELDS = (
    "name",
    "queue",
    "cron",
    "every_seconds",
    "timezone",
    "payload",
    "kind",
    "priority",
    "paused",
    "catch_up",
    "next_run_at",
    "last_run_at",
    "last_task_id",
    "created_at",
    "updated_at",
)
