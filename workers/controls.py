"""Worker controls: an operator asks a worker to quiet (claim nothing, finish what it holds) or stop
(finish what it holds, then exit), and takes it back with resume.

The server enforces quiet itself: a claim from a quiet or stopped worker is
answered at once with no tasks and ``"control"``, whatever the worker's
language, so no task is handed to it after the control is set. Heartbeat
answers carry ``"control"`` too; the reference worker exits once a stop finds
it holding nothing.

Every claim asks, so the answer must cost no query: the controlled workers
(a handful at most) are one cached row set (``taskforge.infra.rowcache``),
dropped in every process when a control changes.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models.functions import Now

from taskforge.http.errors import DomainError
from taskforge.infra import rowcache
from taskforge.ops import audit
from workers.models import Control, Worker

#: The actions of ``POST /workers/{worker_id}/{action}`` and the admin's buttons: the control each sets.
ACTIONS: dict[str, Control | None] = {"quiet": Control.QUIET, "stop": Control.STOP, "resume": None}


class WorkerNotFound(DomainError):
    status_code = 404
    code = "not_found"

    def __init__(self, worker_id: str) -> None:
        super().__init__(f"worker {worker_id!r} has not been seen (or was pruned)")


def _load_controlled(_: str) -> dict[str, str]:
    rows = Worker.objects.exclude(control=None).values_list("worker_id", "control")
    return {worker_id: control for worker_id, control in rows if control is not None}


_controlled: rowcache.RowCache[dict[str, str]] = rowcache.RowCache(_load_controlled)


def control_for(worker_id: str) -> str | None:
    """``"quiet"``, ``"stop"`` or None: what this worker has been asked."""
    controlled = _controlled.get("")
    return None if controlled is None else controlled.get(worker_id)


def set_control(worker_id: str, control: Control | None, *, actor: str) -> None:
    """Ask ``worker_id`` to quiet or stop (None: resume); ``WorkerNotFound`` for a worker never seen."""
    with transaction.atomic():
        changed = Worker.objects.filter(worker_id=worker_id).update(
            control=control, control_at=None if control is None else Now()
        )
        if not changed:
            raise WorkerNotFound(worker_id)
        rowcache.changed()  # every process drops its copy once this commits
    action = control.value if control is not None else "resume"
    audit.record("worker.control", actor, f"worker {worker_id!r} told to {action}", worker_id=worker_id, control=action)
