"""The containers' processes, run as Docker would run them (there is no Docker engine here).

A module fixture lays out what the image holds: the files ``docker build``
sends (``.dockerignore`` applied) and the result of the Dockerfile's
collectstatic step, run with the build's environment (no database, a
throwaway key). Each process then starts from that directory with the
command from the Dockerfile or docker-compose.yml, the image's ENV plus the
environment Compose would give it (interpolated from a fresh .env), and
only the servers swapped for this test's Postgres database and Redis DB.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from deploy import make_env
from queues.models import ApiKey
from tests import live
from tests.live import LiveStack, free_port
from tests.system.deploy import specs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

VENV_BIN = str(Path(sys.executable).parent)
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
COMPOSE = specs.load_compose()
DOTENV = specs.read_env_file(make_env.render(specs.ENV_EXAMPLE.read_text())[0])
SERVICES = specs.interpolate_tree(COMPOSE, DOTENV)["services"]


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        path.relative_to(root).as_posix(): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in root.rglob("*")
        if path.is_file()
    }


def image_env(home: Path) -> dict[str, str]:
    """The image's ENV, with /opt/venv standing for this test run's virtualenv."""
    env = specs.image_env(specs.dockerfile_instructions())
    env["PATH"] = env["PATH"].replace("/opt/venv/bin", VENV_BIN).replace("$PATH", SYSTEM_PATH)
    return {"HOME": str(home), **env}


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """/app as the Dockerfile builds it: the build context, then the collectstatic RUN step."""
    root = tmp_path_factory.mktemp("image") / "app"
    for relative in specs.build_context_files():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(specs.ROOT / relative, target)
    [step] = [
        i.args
        for i in specs.final_stage(specs.dockerfile_instructions())
        if i.keyword == "RUN" and "collectstatic" in i.args
    ]
    build = subprocess.run(
        ["sh", "-c", step.replace("/app", str(root))],
        cwd=root,
        env=image_env(root),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stderr
    yield root


def container_env(service: str, image_root: Path, **overrides: str) -> dict[str, str]:
    env = {**image_env(image_root), **specs.environment(SERVICES[service])}
    if "DATABASE_URL" in env:
        env.update(DATABASE_URL=live.test_database_url(), REDIS_URL=settings.REDIS_URL)
    return {**env, **overrides}


def resolved(argv: list[str], env: dict[str, str]) -> list[str]:
    program = shutil.which(argv[0], path=env["PATH"])
    assert program, f"{argv[0]} is not on the image's PATH"
    return [program, *argv[1:]]


@dataclass
class Service:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def wait_for(self, event: str, stack: LiveStack, timeout: float = 90.0) -> None:
        """Until the process logs ``event`` (its signal handlers are installed by then)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if f'"{event}"' in self.log.read_text(errors="replace"):
                return
            assert self.process.poll() is None, f"{self.name} exited {self.process.returncode}:\n{stack.output()}"
            time.sleep(0.1)
        pytest.fail(f"{self.name} never logged {event}:\n{stack.output()}")


def start(stack: LiveStack, service: str, image_root: Path, **overrides: str) -> Service:
    env = container_env(service, image_root, **overrides)
    argv = resolved(SERVICES[service]["command"], env)
    log = stack.log_dir / f"{service}-{len(stack.processes)}.log"
    stack.logs.append(log)
    process = subprocess.Popen(argv, cwd=image_root, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    stack.processes.append(process)
    return Service(service, process, log)


def wait_healthy(url: str, stack: LiveStack, timeout: float = 60.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    pytest.fail(f"{url} never answered /healthz:\n{stack.output()}")


def stop_within_grace(processes: dict[str, subprocess.Popen[bytes]], stack: LiveStack) -> dict[str, float]:
    """SIGTERM as `docker compose stop` sends it, to all at once; each must exit 0 before its SIGKILL."""
    started = time.monotonic()
    for process in processes.values():
        process.send_signal(signal.SIGTERM)
    took = {}
    for service, process in processes.items():
        grace = specs.duration_seconds(COMPOSE["services"][service]["stop_grace_period"])
        try:
            code = process.wait(max(0.1, started + grace - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"{service} ignored SIGTERM for {grace:.0f} s (Docker would SIGKILL it):\n{stack.output()}")
        assert code == 0, f"{service} exited {code} on SIGTERM:\n{stack.output()}"
        took[service] = time.monotonic() - started
    return took


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LiveStack]:
    stack = LiveStack(env={}, log_dir=tmp_path)
    try:
        yield stack
    finally:
        stack.stop()


def run_healthcheck(env: dict[str, str], image_root: Path) -> int:
    argv = resolved(specs.healthcheck_cmd(), env)
    return subprocess.run(argv, cwd=image_root, env=env, capture_output=True, timeout=10).returncode


def test_image_serves_healthz_as_the_container_starts_it(image_root, stack):
    assert not (image_root / ".taskforge").exists(), "the build must not create dev secrets"
    assert (image_root / "staticfiles" / "admin" / "css" / "base.css").exists()
    before = _snapshot(image_root)

    port = free_port()
    env = container_env("api", image_root, PORT=str(port))
    process = subprocess.Popen(
        resolved(specs.dockerfile_cmd(), env),
        cwd=image_root,
        env=env,
        stdout=(stack.log_dir / "api.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    stack.processes.append(process)
    stack.logs.append(stack.log_dir / "api.log")
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, stack)

    assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{url}/readyz").status_code == 200
    # WhiteNoise serves what collectstatic put into the image.
    static = httpx.get(f"{url}/static/admin/css/base.css")
    assert static.status_code == 200 and "text/css" in static.headers["content-type"]
    assert run_healthcheck(env, image_root) == 0

    stop_within_grace({"api": process}, stack)
    assert run_healthcheck(env, image_root) != 0, "the healthcheck must fail when nothing serves"
    # The image's code is root-owned and read-only for the runtime user: nothing may write there.
    assert _snapshot(image_root) == before


def test_compose_services_run_a_task_and_stop_cleanly(image_root, stack):
    # 1. migrate: migrations, then the admin key and superuser from .env (twice: restarts are harmless).
    env = container_env("migrate", image_root)
    for _ in range(2):
        migrate = subprocess.run(
            resolved(SERVICES["migrate"]["command"], env),
            cwd=image_root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert migrate.returncode == 0, migrate.stdout + migrate.stderr
        assert "admin API key are in place" in migrate.stdout
        logs = migrate.stdout + migrate.stderr
        assert DOTENV["TASKFORGE_ADMIN_API_KEY"] not in logs and DOTENV["TASKFORGE_ADMIN_PASSWORD"] not in logs
        assert DOTENV["TASKFORGE_WORKER_API_KEY"] not in logs
    assert ApiKey.objects.filter(name="admin", role=ApiKey.Role.ADMIN).count() == 1
    # The workers run with a worker-role key of their own, never the admin key.
    assert ApiKey.objects.filter(name="workers", role=ApiKey.Role.WORKER).count() == 1
    assert SERVICES["worker"]["environment"]["TASKFORGE_API_KEY"] == DOTENV["TASKFORGE_WORKER_API_KEY"]
    admin = get_user_model().objects.get(username=DOTENV["TASKFORGE_ADMIN_USERNAME"])
    assert admin.is_superuser and admin.check_password(DOTENV["TASKFORGE_ADMIN_PASSWORD"])

    # 2. The long-running services, each with its own command and environment.
    port = free_port()
    # One gunicorn worker process: the test above serves with the image's exact settings.
    services = {"api": start(stack, "api", image_root, PORT=str(port), WEB_CONCURRENCY="1")}
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, stack)
    for name in ("scheduler", "dispatcher", "watchdog"):
        services[name] = start(stack, name, image_root)
    services["worker"] = start(stack, "worker", image_root, TASKFORGE_API_URL=url)
    for name in ("scheduler", "dispatcher", "watchdog"):
        services[name].wait_for("loop.start", stack)
    services["worker"].wait_for("worker.start", stack)

    # 3. A task from enqueue to done, with the admin key from .env.
    headers = {"Authorization": f"Bearer {DOTENV['TASKFORGE_ADMIN_API_KEY']}"}
    created = httpx.post(f"{url}/queues", json={"name": "deploy_demo"}, headers=headers)
    assert created.status_code == 201, created.text
    task = httpx.post(f"{url}/queues/deploy_demo/tasks", json={"payload": {"sleep_ms": 50}}, headers=headers)
    assert task.status_code == 201, task.text
    task_url = f"{url}/queues/deploy_demo/tasks/{task.json()['id']}"
    deadline = time.monotonic() + 60  # generous: the suite shares two CPUs
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = httpx.get(task_url, headers=headers).json()
        if body["status"] == "done":
            break
        time.sleep(0.2)
    assert body.get("status") == "done", f"{body}\n{stack.output()}"
    assert body["result"]["slept_ms"] >= 50

    # 4. `docker compose down`: the worker first (it depends on the api), then the rest together.
    for service in services.values():
        assert service.process.poll() is None, f"{service.name} died early:\n{stack.output()}"
    stop_within_grace({"worker": services["worker"].process}, stack)
    stop_within_grace({name: services[name].process for name in ("scheduler", "dispatcher", "watchdog", "api")}, stack)
