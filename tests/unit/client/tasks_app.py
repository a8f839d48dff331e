"""Task functions the unit tests of ``@app.task`` and the in-process mode run."""

from __future__ import annotations

from taskforge_client import Fail, Retry, TaskForge, current_job

app = TaskForge("http://taskforge.invalid", "tf_test")
calls: list[tuple[str, int]] = []


@app.task(queue="emails", kind="emails.send_welcome", max_retries=5, timeout=60, priority=3)
def send_welcome(user_id: str, *, template: str = "welcome") -> dict[str, str]:
    calls.append(("send_welcome", current_job().attempts))
    return {"user_id": user_id, "template": template}


@app.task(queue="emails", max_retries=2)
def flaky(fail_times: int) -> int:
    job = current_job()
    calls.append(("flaky", job.attempts))
    if job.attempts <= fail_times:
        raise ConnectionError(f"attempt {job.attempts} failed")
    return job.attempts


@app.task(queue="reports", priority=1)
def refuse(reason: str) -> None:
    raise Fail(reason)


@app.task
def again_later() -> None:
    raise Retry("not yet", after=60)


@app.task(queue="reports")
async def add_async(a: int, b: int) -> int:
    return a + b


@app.task(queue="reports")
def fan_out(n: int) -> list[str]:
    return [send_welcome.enqueue(str(i)).id for i in range(n)]


@app.task(queue="reports")
def quiet(n: int) -> None:
    calls.append(("quiet", n))


@app.task(queue="reports")
def falsy() -> int:
    return 0
