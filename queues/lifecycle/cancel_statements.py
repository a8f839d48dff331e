"""Named statements for cancelling running tasks (a request the worker hears on its heartbeats).

A ``pending`` or ``retry`` task is cancelled at once by ``statements.CANCEL_ONE``;
a ``claimed`` or ``executing`` one is only marked here, and the move to
``cancelled`` happens when its attempt fails (``statements.FAIL``, by a nack or
a lease expiry, which read the mark under their row lock). Part of
``queues.lifecycle.statements.ALL`` (EXPLAINed by the tests with every other
statement).
"""

from __future__ import annotations

# Mark one running task of the queue as asked to stop. Not a status transition,
# so no history row. ``t.*`` is every task column (``statements._TASK_COLUMNS``
# lists them all), which the API renders as it renders any moved row.
REQUEST_CANCEL = """
UPDATE tf_task t SET cancel_requested = true, updated_at = now()
WHERE t.id = %(task_id)s AND t.queue_id = %(queue_id)s AND t.status IN ('claimed', 'executing')
RETURNING t.*
"""

#: This module's statements, name -> SQL (merged into ``statements.ALL``).
ALL: dict[str, str] = {
    name: value
    for name, value in dict(globals()).items()
    if name.isupper() and not name.startswith("_") and isinstance(value, str)
}
