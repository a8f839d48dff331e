"""The one owner of task status.

Every transition of ``queues.models.ALLOWED_TRANSITIONS`` happens in this
package, as one guarded SQL statement (``UPDATE ... WHERE status IN (...) AND
claimed_by = ...`` joined to a ``SELECT ... FOR UPDATE``), which also writes the
``TaskEvent`` rows in the same statement. Two processes can therefore never both
win a move, and the history can never disagree with the task. Time always comes
from Postgres' ``now()``: a worker or loop with a skewed clock cannot expire a
healthy lease.

After the commit each move is announced to ``queues.dispatch.announce`` (Redis
lanes, long-poll doorbells) and reported to ``queues.telemetry.observe`` (JSON
log line, metrics), so a crash between the two loses nothing: Redis is
re-derived from Postgres by the loops.

Functions return task rows as dicts (column name -> value), which the API
renders directly; the hot paths never build model instances.

The modules, by who asks for the move:

* ``statements``: every SQL statement, each variant named and built once at import.
* ``produce``: enqueue (producers).
* ``grouped``: concurrent single enqueues into one queue sharing one statement (group commit).
* ``lease``: claim, heartbeat, ack, nack, lease expiry (workers and the watchdog).
* ``on_loop``, ``lease_on_loop``: a single enqueue, and a worker's claim of one
  queue, heartbeat, ack and nack, on the API's event loop (the lean edge).
* ``operate``: promote, retry now, cancel, purge, replay, discard, delete a
  queue, prune (the scheduler, operators, producers' cancels).
* ``cancelling``: cancel at once (waiting tasks) or on request (running
  tasks: ``cancel_requested``, settled by the attempt's nack or expiry).
* ``decide``: the decisions that need no database (retry or dead, backoff,
  a repeated ack), unit-tested alone.
* ``rows``: running a statement and turning its rows into dicts.
* ``reads``: the reads that explain a refused move (404 or 409).
* ``notify``: the after-commit announcements and reports, and the mark of a
  task whose result a request waits for (only those ring a result bell).

Callers use the names re-exported here, never the modules.
"""

from __future__ import annotations

from queues.lifecycle.cancelling import cancel_or_request, request_cancel
from queues.lifecycle.grouped import enqueue_single
from queues.lifecycle.lease import (
    AckItem,
    NackItem,
    ack,
    ack_many,
    claim,
    expire_leases,
    heartbeat,
    nack,
    nack_item,
    nack_many,
)
from queues.lifecycle.lease_on_loop import ack_on_loop, claim_on_loop, heartbeat_on_loop, nack_on_loop
from queues.lifecycle.notify import await_result
from queues.lifecycle.on_loop import enqueue_on_loop
from queues.lifecycle.operate import (
    cancel,
    delete_queue,
    discard,
    discard_many,
    promote_due,
    prune_finished,
    prune_unseen_workers,
    purge,
    replay,
    replay_many,
    retry_now,
)
from queues.lifecycle.produce import NewTask, enqueue, fingerprint
from queues.lifecycle.reads import get_task, get_task_anywhere
from queues.lifecycle.rows import DomainErrorT, Row, fetch_rows

__all__ = [
    "AckItem",
    "DomainErrorT",
    "NackItem",
    "NewTask",
    "Row",
    "ack",
    "ack_many",
    "ack_on_loop",
    "await_result",
    "cancel",
    "cancel_or_request",
    "claim",
    "claim_on_loop",
    "delete_queue",
    "discard",
    "discard_many",
    "enqueue",
    "enqueue_on_loop",
    "enqueue_single",
    "expire_leases",
    "fetch_rows",
    "fingerprint",
    "get_task",
    "get_task_anywhere",
    "heartbeat",
    "heartbeat_on_loop",
    "nack",
    "nack_item",
    "nack_many",
    "nack_on_loop",
    "promote_due",
    "prune_finished",
    "prune_unseen_workers",
    "purge",
    "replay",
    "replay_many",
    "request_cancel",
    "retry_now",
]
