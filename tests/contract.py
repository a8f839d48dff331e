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
