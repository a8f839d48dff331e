"""The admin registrations, one module per page family.

Read-mostly: every task state change goes through ``queues.lifecycle`` (the
actions here only pick eligible rows, ask for confirmation, call it and log).
"""

from dashboard.admin import apikeys, deadletters, queues, schedules, tasks

__all__ = ["apikeys", "deadletters", "queues", "schedules", "tasks"]
