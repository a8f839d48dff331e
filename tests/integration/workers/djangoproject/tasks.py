"""The project's @task functions."""

from __future__ import annotations

from django.tasks import task


@task
def add(a: int, b: int) -> int:
    return a + b


@task(priority=60, queue_name="reports")
def report(name: str, *, rows: list[int]) -> dict[str, object]:
    return {"name": name, "total": sum(rows)}


@task(takes_context=True)
def second_time_lucky(context) -> int:  # type: ignore[no-untyped-def]
    if context.attempt == 1:
        raise ValueError("first attempt fails")
    return context.attempt


@task
def always_fails() -> None:
    raise KeyError("missing")
