"""Domain errors. Each carries its HTTP status and contract code, so the one
exception handler in ``taskforge.http.errors`` maps them without knowing the apps."""

from __future__ import annotations

from taskforge.http.errors import DomainError


class QueueNotFound(DomainError):
    status_code = 404
    code = "not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"queue {name!r} does not exist")


class TaskNotFound(DomainError):
    status_code = 404
    code = "not_found"

    def __init__(self, task_id: object) -> None:
        super().__init__(f"task {task_id} does not exist")


class ScheduleNotFound(DomainError):
    status_code = 404
    code = "not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"schedule {name!r} does not exist")


class ScheduleNameTaken(DomainError):
    status_code = 409
    code = "conflict"

    def __init__(self, name: str) -> None:
        super().__init__(f"schedule {name!r} already exists")


class LeaseLost(DomainError):
    status_code = 409
    code = "lease_lost"

    def __init__(self, task_id: object) -> None:
        super().__init__(
            f"task {task_id} is not leased to this worker (the lease expired, was reclaimed, "
            "or the task already finished)"
        )


class InvalidTransition(DomainError):
    status_code = 409
    code = "conflict"


class QueueNotEmpty(DomainError):
    status_code = 409
    code = "conflict"

    def __init__(self, name: str, blocking: int) -> None:
        super().__init__(
            f"queue {name!r} still has {blocking} task(s) in pending, claimed, executing, retry "
            "or dead; cancel, finish or discard them first"
        )


class IdempotencyConflict(DomainError):
    status_code = 409
    code = "conflict"

    def __init__(self, key: str) -> None:
        super().__init__(f"idempotency_key {key!r} was already used with a different body")


class QueueNameTaken(DomainError):
    status_code = 409
    code = "conflict"

    def __init__(self, name: str) -> None:
        super().__init__(f"queue {name!r} already exists")


class NotAPushQueue(DomainError):
    status_code = 409
    code = "conflict"

    def __init__(self, name: str) -> None:
        super().__init__(f"queue {name!r} is not a push queue (its push is null), so it has no push secret")


class PushQueueNotClaimable(DomainError):
    status_code = 409
    code = "conflict"

    def __init__(self, name: str) -> None:
        super().__init__(f"queue {name!r} is a push queue: TaskForge delivers its tasks, workers cannot claim them")
