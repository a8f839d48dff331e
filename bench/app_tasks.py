"""The benchmark's ``@app.task`` module: W3K runs the reference worker on it (``bench.app_tasks``).

The same no-op as ``bench.handlers:noop``, reached through the app's kind
lookup and argument binding instead of one ``--handler`` function, so W3K
against W3 is what the decorator costs a drain.
"""

from __future__ import annotations

from taskforge_client import TaskForge

app = TaskForge()  # TASKFORGE_API_URL / TASKFORGE_API_KEY: the worker's own settings


# bench/drain.py's APP_TASK preloads tasks of this kind (the payload noop.enqueue() would send).
@app.task(queue="bench_w3", kind="bench.noop")
def noop() -> None:
    return None
