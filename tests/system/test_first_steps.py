"""A new user's first steps, end to end, against ``make run``.

The client wheel is installed into a fresh virtualenv without Django
(``client_venv``); a module of the user's defines two tasks with
``@app.task``; the reference worker from that virtualenv runs them; a
producer script from the same virtualenv enqueues, waits for a result, sees
one attempt time out, cancels one task while it runs; and the admin of the
same ``make run`` shows the progress that task reported. Nothing of the
server is importable from the virtualenv, and every step goes over HTTP.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import httpx
import pytest

from queues.apikeys import create_key
from taskforge.dev import launcher
from tests.system.client_venv import Installed
from tests.system.devstack import DevStack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TASKS_MODULE = '''
"""The user's tasks: one quick, one long that reports progress and stops when told to."""
from taskforge_client import TaskForge, current_job

app = TaskForge()  # TASKFORGE_API_URL and TASKFORGE_API_KEY


@app.task(queue="maths", kind="maths.add", priority=3)
def add(a: int, b: int) -> int:
    return a + b


@app.task(queue="reports", kind="reports.crunch", max_retries=0)
def crunch(steps: int, pause: float) -> dict:
    job = current_job()
    for step in range(1, steps + 1):
        job.progress({"step": step, "of": steps})
        if job.cancelled.wait(pause):  # cancelled, timed out or shutting down
            return {"stopped_at": step}
    return {"steps": steps}
'''

PRODUCER = """
import json, time
from taskforge_client import TaskCancelled, TaskFailed
from myapp.tasks import add, crunch

seen = {"sum": add.enqueue(2, 3).result(timeout=60)}

too_slow = crunch.options(timeout=2).enqueue(steps=200, pause=0.1)
try:
    too_slow.result(timeout=60)
except TaskFailed as failed:
    seen["timed_out"] = {"id": too_slow.id, "last_error": failed.last_error}

running = crunch.enqueue(steps=600, pause=0.1)
deadline = time.monotonic() + 60
while ((running.refresh().get("progress") or {}).get("step") or 0) < 3:
    assert time.monotonic() < deadline, "no progress reported"
    time.sleep(0.1)
seen["cancel_answer"] = running.cancel()["status"]
try:
    running.result(timeout=60)
except TaskCancelled:
    seen["cancelled"] = {"id": running.id, "task": running.refresh()}
print(json.dumps(seen))
"""


def _write_user_project(root: Path) -> Path:
    package = root / "myapp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(textwrap.dedent(TASKS_MODULE))
    (root / "produce.py").write_text(textwrap.dedent(PRODUCER))
    return root


def _log_in_to_the_admin(http: httpx.Client, url: str, username: str, password: str) -> None:
    """Log in as a browser would (make run's cookies are Secure: httpx keeps them back over http, so copy them)."""
    login = http.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text)
    assert token, login.text[:500]
    for cookie in login.cookies.jar:
        http.cookies.set(cookie.name, cookie.value)
    answer = http.post(
        "/admin/login/?next=/admin/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": token.group(1), "next": "/admin/"},
        headers={"Referer": f"{url}/admin/login/"},
    )
    assert answer.status_code == 302, answer.text[:500]
    for cookie in answer.cookies.jar:
        http.cookies.set(cookie.name, cookie.value)


def test_install_define_run_enqueue_wait_time_out_cancel_and_see_progress(
    devstack: DevStack, client_venv: Installed, tmp_path: Path
) -> None:
    credentials = devstack.credentials()
    admin_key = credentials["api_key"]
    with httpx.Client(base_url=devstack.url, headers={"Authorization": f"Bearer {admin_key}"}, timeout=15) as api:
        for queue in ("maths", "reports"):
            assert api.post("/queues", json={"name": queue}).status_code == 201
    _, producer_key = create_key("first-steps-producer", "producer")
    _, worker_key = create_key("first-steps-worker", "worker")
    project = _write_user_project(tmp_path / "project")
    common = {"TASKFORGE_API_URL": devstack.url, "PYTHONPATH": str(project)}

    worker_log = tmp_path / "worker.log"
    worker = launcher.spawn(
        [str(client_venv.bin / "taskforge-worker"), "myapp.tasks", "--heartbeat-interval", "0.5"],
        client_venv.environ({**common, "TASKFORGE_API_KEY": worker_key, "WORKER_LOG_FORMAT": "text"}),
        log=worker_log,
        cwd=project,
    )
    try:
        produced = client_venv.run(
            client_venv.python, project / "produce.py", env={**common, "TASKFORGE_API_KEY": producer_key}, timeout=240
        )
        assert produced.returncode == 0, f"{produced.stderr}\n--- worker:\n{worker_log.read_text()[-4000:]}"
    finally:
        launcher.terminate(worker, grace=20)
    assert worker.returncode == 0, worker_log.read_text()[-4000:]
    seen = json.loads(produced.stdout.strip().splitlines()[-1])

    assert seen["sum"] == 5
    assert seen["timed_out"]["last_error"].startswith("execution timed out after 2 s")
    assert seen["cancel_answer"] == "executing"  # a running task is asked to stop (202), not cancelled yet
    cancelled = seen["cancelled"]["task"]
    assert cancelled["status"] == "cancelled" and cancelled["cancel_requested"] is True
    assert cancelled["progress"]["step"] >= 3 and cancelled["progress"]["of"] == 600

    # The admin of the same make run shows the task's kind, its progress and its time limit.
    with httpx.Client(base_url=devstack.url, timeout=15) as admin:
        _log_in_to_the_admin(admin, devstack.url, credentials["username"], credentials["password"])
        page = admin.get(f"/admin/queues/task/{seen['cancelled']['id']}/change/")
        assert page.status_code == 200
        assert "reports.crunch" in page.text
        assert f"&quot;step&quot;: {cancelled['progress']['step']}" in page.text
        timed_out = admin.get(f"/admin/queues/task/{seen['timed_out']['id']}/change/")
        assert "2 s per attempt, counted from its claim" in timed_out.text
        assert "execution timed out after 2 s" in timed_out.text


def test_the_worker_refuses_an_app_module_that_does_not_import(client_venv: Installed, tmp_path: Path) -> None:
    done = client_venv.run(
        client_venv.bin / "taskforge-worker",
        "nosuchapp.tasks",
        env={"TASKFORGE_API_KEY": "tf_unused", "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "nosuchapp" in done.stderr
