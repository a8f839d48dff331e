"""The reference worker at its defaults: only its queue and handler on the command line.

W3D and W8 measure what a user gets without tuning: no ``--concurrency``,
``--wait-seconds`` or ``--log-level``, and none of the worker's environment
settings inherited from the harness's shell either.
"""

from __future__ import annotations

from bench.context import Context
from bench.procs import Child

HANDLER = "bench.handlers:noop"
# The worker's own settings read from the environment (see ``python -m workers --help``).
SETTING_VARIABLES = ("QUEUE", "WORKER_", "HEARTBEAT_INTERVAL")


def start(ctx: Context, queue: str, *, processes: int, label: str) -> list[Child]:
    """``processes`` reference workers with default settings, each its own process."""
    env = {name: value for name, value in ctx.stack.env().items() if not name.startswith(SETTING_VARIABLES)}
    env.update(TASKFORGE_API_URL=ctx.stack.api_url, TASKFORGE_API_KEY=ctx.stack.keys["worker"])
    argv = [ctx.stack.python, "-m", "workers", "--handler", HANDLER, "--queue", queue]
    return [ctx.supervisor.spawn(f"{label}-defaults-{n}", argv, env) for n in range(processes)]
