"""The shared metrics directory of a gunicorn master and its worker processes.

Called from gunicorn.conf.py's server hooks. prometheus_client decides at
import time whether values go to memory or to files in
``PROMETHEUS_MULTIPROC_DIR``, so the variable is set in the master before
any worker forks (and before anything imports prometheus_client there).
A directory given by the operator is used as is (emptied at start, as
prometheus_client requires); otherwise a private temporary one is made and
removed at exit. Request counters then survive a worker restart and every
scrape sums all workers of this server.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

ENV = "PROMETHEUS_MULTIPROC_DIR"
_created: str | None = None


def on_starting(server: object) -> None:
    global _created
    path = os.environ.get(ENV)
    if not path:
        path = _created = tempfile.mkdtemp(prefix="taskforge-metrics-")
        os.environ[ENV] = path
    Path(path).mkdir(parents=True, exist_ok=True)
    for stale in Path(path).glob("*.db"):
        stale.unlink()


def child_exit(server: object, worker: object) -> None:
    from prometheus_client import multiprocess

    # Drops the dead process's live gauges; its counters are kept and still summed.
    # (gunicorn's Worker has a pid; prometheus_client's multiprocess module is unannotated.)
    multiprocess.mark_process_dead(worker.pid)  # type: ignore[attr-defined, no-untyped-call]


def on_exit(server: object) -> None:
    if _created:
        shutil.rmtree(_created, ignore_errors=True)
