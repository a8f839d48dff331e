"""Group commit: concurrent single enqueues into one queue share one INSERT and one commit.

A producer that posts one task per request pays, per task, a statement, a
durable commit (a WAL flush), a lane and doorbell pipeline and a Postgres
round trip; a batch of N pays each of them once. When several requests of
one API process enqueue into the same queue at the same moment, the first
one runs its statement at once and the others, arriving while it runs, wait
for it and then go together as the next statement, led by the first of them.
A request that finds no statement in flight goes alone, at once: nothing
ever waits for company, so a lone producer pays only a lock.

Each request is still answered only once its own task is durable (the
statement that wrote it has committed), with its own row; its transition is
logged and counted in its own thread, so the log line carries its request id.
If the shared statement fails, every request it carried gets that error, as
it would have alone: nothing is retried here, since a statement that failed
after its commit was sent may have written its tasks (the producer's retry,
or its idempotency key, decides, as for any failed call).

Not grouped: items with an idempotency key (their insert and the read of the
key's existing task need one transaction of their own) and calls made inside
a caller's transaction (another thread cannot write into it).
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field

from django.db import connection

from queues.lifecycle.notify import report_on_commit
from queues.lifecycle.produce import NewTask, enqueue
from queues.lifecycle.rows import Row
from queues.models import Queue
from taskforge.http.errors import connection_lost

#: What the statement and its announcement read of the queue: requests that
#: hold different copies of the row (one edited since) are not mixed.
GroupKey = tuple[uuid.UUID, str, int, int | None, bool]


def group_key(queue: Queue) -> GroupKey:
    return (queue.id, queue.name, queue.max_retries, queue.timeout_seconds, queue.paused)


@dataclass(eq=False)
class _Waiter:
    task: NewTask
    woken: threading.Event = field(default_factory=threading.Event)
    outcome: tuple[Row, bool] | None = None
    error: BaseException | None = None
    # Set when this waiter is woken to lead the statement of the waiters in it.
    leads: list[_Waiter] | None = None


_lock = threading.Lock()
# Queues with a statement in flight, and the waiters that arrived meanwhile (the next statement).
_waiting: dict[GroupKey, list[_Waiter]] = {}


def enqueue_single(queue: Queue, task: NewTask) -> tuple[Row, bool]:
    """Enqueue one task, durably, sharing the statement with concurrent enqueues into ``queue``."""
    if task.idempotency_key is not None or connection.in_atomic_block:
        return enqueue(queue, [task])[0]
    me = _Waiter(task)
    key = group_key(queue)
    with _lock:
        if key in _waiting:
            _waiting[key].append(me)
            joined = True
        else:
            _waiting[key] = []
            joined = False
    if joined:
        me.woken.wait()
        if me.leads is not None:
            _lead(queue, key, me.leads)
    else:
        _lead(queue, key, [me])
    if me.error is not None:
        # The same exception in every thread of the group: each request answers it as it would alone.
        raise me.error
    assert me.outcome is not None
    report_on_commit([me.outcome[0]])  # outside a transaction: at once, in this request's context
    return me.outcome


def _lead(queue: Queue, key: GroupKey, group: list[_Waiter]) -> None:
    """Run the statement of ``group`` (``group[0]`` is this thread), wake its waiters, hand the queue on."""
    try:
        outcomes = enqueue(queue, [waiter.task for waiter in group], report=False)
    except BaseException as exc:
        # Judged here, on the thread whose connection ran it: a broken connection is a 503 for all.
        error = connection_lost(exc) if isinstance(exc, Exception) else exc
        for waiter in group:
            waiter.error = error
    else:
        for waiter, outcome in zip(group, outcomes, strict=True):
            waiter.outcome = outcome
    finally:
        with _lock:
            following = _waiting[key]
            if following:
                _waiting[key] = []
                following[0].leads = following
            else:
                del _waiting[key]
        if following:
            following[0].woken.set()  # the next statement starts before this one's waiters answer
        for waiter in group[1:]:
            waiter.woken.set()
