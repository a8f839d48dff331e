"""``make run``: the whole TaskForge stack in one terminal.

1. Postgres and Redis: the ones in ``DATABASE_URL`` / ``REDIS_URL``, or
   embedded servers under ``.taskforge/`` when those are unset.
2. ``migrate``, ``collectstatic``, and an admin API key + superuser (printed,
   and kept in ``.taskforge/credentials.json``, mode 0600).
3. The API (gunicorn, exactly as in production), the scheduler, dispatcher
   and watchdog loops, and ``WORKERS`` demo workers, supervised
   (``taskforge.dev.supervisor``): a process that exits, however it ends, is
   logged on stderr and started again after a short, growing delay.
4. Only Ctrl-C (or SIGTERM) ends ``make run``: it stops every child
   gracefully, then the servers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from taskforge.dev import launcher
from taskforge.dev.supervisor import Supervisor

ROOT = launcher.ROOT
STOP_GRACE_SECONDS = 20
DEMO_HANDLER = "taskforge_client.demo:handle"


def _manage(*args: str, env: dict[str, str]) -> None:
    subprocess.run(launcher.manage_py(*args), cwd=ROOT, env=env, check=True)


def _log(message: str) -> None:
    print(f"make run: {message}", file=sys.stderr, flush=True)


def main() -> int:
    home = Path(os.environ.get("TASKFORGE_HOME", ROOT / ".taskforge"))
    env = dict(os.environ)
    services = None
    if not (env.get("DATABASE_URL") and env.get("REDIS_URL")):
        from taskforge.dev import embedded

        print(f"Starting embedded Postgres and Redis under {home} ...", flush=True)
        services = embedded.start(home)
        env.update({k: v for k, v in services.env.items() if not env.get(k)})
        # Development keeps a generated secret under .taskforge/ (never in the repo).
        env.setdefault("DJANGO_SECRET_KEY", embedded.dev_secret_key(home))
    supervisor = Supervisor(log=_log)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        _manage("migrate", "--no-input", "-v", "0", env=env)
        _manage("collectstatic", "--no-input", "-v", "0", env=env)
        _manage("ensure_admin", "--credentials-file", str(home / "credentials.json"), env=env)
        port = env.setdefault("PORT", "8080")
        api = launcher.api_server(port=int(port))
        supervisor.add("api", api.argv, api.environ(env))
        for command in launcher.LOOPS:
            loop = launcher.loop(command)
            supervisor.add(command.removeprefix("run_"), loop.argv, loop.environ(env))
        workers = int(env.get("WORKERS", "0") or 0)
        # The demo workers use the admin key ensure_admin keeps (admin may call the worker protocol);
        # it holds a "(kept from an earlier start...)" note instead when the database outlived .taskforge/.
        worker_key = ""
        if workers:
            worker_key = env.get("TASKFORGE_API_KEY") or json.loads((home / "credentials.json").read_text())["api_key"]
            if worker_key.startswith("("):
                print("WORKERS: no API key known for the demo workers; set TASKFORGE_API_KEY.", file=sys.stderr)
                workers = 0
        if workers:
            worker_env = {
                **env,
                "TASKFORGE_API_URL": env.get("TASKFORGE_API_URL", f"http://127.0.0.1:{port}"),
                "TASKFORGE_API_KEY": worker_key,
            }
            for number in range(workers):
                name = f"demo-worker-{number + 1}"
                worker = launcher.reference_worker(handler=env.get("DEMO_HANDLER") or DEMO_HANDLER, worker_id=name)
                supervisor.add(name, worker.argv, worker.environ(worker_env))
        print(f"TaskForge is serving on http://127.0.0.1:{port} (admin: /admin/). Ctrl-C stops it.", flush=True)
        supervisor.run(lambda: stopping)
    finally:
        supervisor.stop(grace=STOP_GRACE_SECONDS)
        if services is not None:
            services.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
