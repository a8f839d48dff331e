"""A single enqueue on the event loop: the statement without a thread hand-off.

The same move as :func:`queues.lifecycle.enqueue` for one task without an
idempotency key: the same statement (``statements.ENQUEUE``, its parameters
from :func:`produce.enqueue_params`), in autocommit, so the task is durable
when the statement returns; then the same failpoint, the same counters and
the same announce (Redis lane and bell) and transition line, those two once
the request has its answer (``taskforge.infra.after_answer``: a claim sent
meanwhile finds the task through Postgres). It runs on a
connection of the event loop's pool (``taskforge.infra.postgres.aio``)
instead of Django's on a pool thread: the hand-off to the thread and back,
Django's request signals and its connection wrapper were a third of a
single enqueue's CPU.

Concurrent single enqueues of one API process into one queue share their
statement and commit, as on the thread path (``queues.lifecycle.grouped``,
whose rules this follows): the first goes at once; those arriving while its
statement runs go together as the next one; nobody waits for company. Each
request is answered once the statement that wrote its task has committed,
and a failed statement fails every request it carried, as each would have
failed alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from django.db import IntegrityError
from psycopg.errors import ForeignKeyViolation

from queues.dispatch import announce
from queues.errors import QueueNotFound
from queues.lifecycle import statements
from queues.lifecycle.grouped import GroupKey, group_key
from queues.lifecycle.ids import new_task_ids
from queues.lifecycle.produce import NewTask, enqueue_params
from queues.lifecycle.rows import Row, fetch_rows_on_loop
from queues.models import Queue
from queues.telemetry import observe
from taskforge.infra.after_answer import after_answer, detached
from taskforge.ops.failpoints import failpoint_on_loop

_Waiter = tuple[NewTask, "asyncio.Future[Row]"]

# Queues with a statement in flight, and the requests that arrived meanwhile (the next statement).
_waiting: dict[GroupKey, list[_Waiter]] = {}
# The statements started for those waiting (a task each), kept until they end.
_running: set[asyncio.Task[None]] = set()


async def enqueue_on_loop(queue: Queue, task: NewTask) -> Row:
    """Enqueue one task without an idempotency key, durably; its row once committed."""
    assert task.idempotency_key is None  # those need a transaction of their own: the thread path
    answer: asyncio.Future[Row] = asyncio.get_running_loop().create_future()
    key = group_key(queue)
    following = _waiting.get(key)
    if following is not None:
        following.append((task, answer))
    else:
        _waiting[key] = []
        await _run(queue, key, [(task, answer)])
    row = await answer
    await observe.transitions_on_loop([row], queue)  # in this request's context: its line carries its request id
    return row


async def _run(queue: Queue, key: GroupKey, group: Sequence[_Waiter]) -> None:
    """Insert ``group``'s tasks in one statement, answer each, and start the statement of those who came since."""
    rows: list[Row] = []
    try:
        rows = await _insert(queue, [task for task, _ in group])
    except Exception as exc:
        # The same exception for every request of the group, as each alone would have had.
        for _, answer in group:
            if not answer.done():
                answer.set_exception(exc)
    except BaseException:
        # Cancelled (the server is stopping): so is every request it carried; whether the
        # statement committed is unknown to them, as to any call cut short.
        for _, answer in group:
            answer.cancel()
        raise
    else:
        for (_, answer), row in zip(group, rows, strict=True):
            if not answer.done():  # its request was cancelled meanwhile: the task is in, answered or not
                answer.set_result(row)
    finally:
        following = _waiting.pop(key)
        if following:
            _waiting[key] = []
            # Its own context: it serves those requests, not the one whose statement ran here.
            started = asyncio.get_running_loop().create_task(_run(queue, key, following), context=detached())
            _running.add(started)
            started.add_done_callback(_running.discard)
    if rows:
        # The lane entries and the bell: once the first request has its answer, or (a statement
        # started for those who waited, in no request of its own) while its requests send theirs.
        await after_answer(lambda: announce.announce_on_loop(queue, rows))


async def _insert(queue: Queue, tasks: list[NewTask]) -> list[Row]:
    """The statement, then the failpoint a committed enqueue passes: the rows, in order."""
    ids = new_task_ids(len(tasks))
    try:
        inserted = await fetch_rows_on_loop(statements.ENQUEUE, enqueue_params(queue, tasks, ids))
    except IntegrityError as exc:
        # The queue row came from a per-process copy and was deleted since (as in produce.enqueue).
        if isinstance(exc.__cause__, ForeignKeyViolation):
            raise QueueNotFound(queue.name) from None
        raise
    await failpoint_on_loop("enqueue.after_commit")
    # Matched by the ids chosen, not by position: RETURNING's order is not promised.
    by_id = {row["id"]: row for row in inserted}
    return [by_id[task_id] for task_id in ids]
