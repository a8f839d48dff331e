"""``@app.task`` functions the live worker tests run.

The worker is started as ``python -m taskforge_client.worker tests.integration.workers.app_tasks``.

Standard library and ``taskforge_client`` only: the tests run the worker with
Django imports blocked. The app reads its URL and key from the environment;
the tests point it at the live API with ``configure()``.
"""

from __future__ import annotations

from taskforge_client import TaskForge, current_job

app = TaskForge(api_key="unset-until-configured")


@app.task(queue="app_math", kind="math.add", priority=3)
def add(a: int, b: int) -> int:
    return a + b


@app.task(queue="app_slow", kind="slow.count", max_retries=0)
def count(steps: int) -> str:
    """Reports each step as progress; stops early when told to (a cancel)."""
    job = current_job()
    for step in range(1, steps + 1):
        job.progress({"step": step, "of": steps})
        if job.cancelled.wait(0.2):
            return f"stopped at {step}"
    return "counted"


@app.task(queue="app_math", kind="math.explode", max_retries=1)
def explode(message: str) -> None:
    raise ValueError(message)


def configure(url: str, api_key: str) -> None:
    """Point the app at a live API (the producer side of the tests)."""
    app.close()
    app.url, app.api_key = url, api_key
