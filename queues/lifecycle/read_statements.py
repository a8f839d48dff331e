"""Named reads the lifecycle's moves use to explain a refusal or to report a move (part of ``statements.ALL``)."""

from __future__ import annotations

from queues.lifecycle import columns

_TASK_COLUMNS = columns.TASK_COLUMNS

# One task of a queue (GET /queues/{name}/tasks/{id}, and why a cancel was refused).
TASK_IN_QUEUE = f"""
SELECT {_TASK_COLUMNS} FROM tf_task t WHERE t.id = %(task_id)s AND t.queue_id = %(queue_id)s
"""

# Tasks by id: tells an idempotent repeat of an ack from a lost lease.
TASKS_BY_IDS = f"""
SELECT {_TASK_COLUMNS} FROM tf_task t WHERE t.id = ANY(%(task_ids)s)
"""

# Whether a task exists at all: a refused lease move is LeaseLost if so, TaskNotFound if not.
TASK_EXISTS = "SELECT 1 FROM tf_task WHERE id = %(task_id)s"

# Whether a queue has a DLQ entry for the task: a refused replay or discard is 409 if so, 404 if not.
DEAD_LETTER_EXISTS = "SELECT 1 FROM tf_dead_letter WHERE id = %(task_id)s AND queue_id = %(queue_id)s"

# The names of queues, by id: what a move's log line and answer need, read on the event loop
# (queues.lifecycle.lease_on_loop) where the ORM would block it.
QUEUE_NAMES = "SELECT id, name FROM tf_queue WHERE id = ANY(%(ids)s::uuid[])"


#: This module's statements, name -> SQL (merged into ``statements.ALL``).
ALL: dict[str, str] = {
    name: value
    for name, value in dict(globals()).items()
    if name.isupper() and not name.startswith("_") and isinstance(value, str)
}
