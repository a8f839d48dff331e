"""The reference worker's command: settings, handler, logging, then the runner until a signal.

``python -m taskforge_client.worker myapp.tasks`` (the ``@app.task`` functions of
an app module, by kind) or ``python -m taskforge_client.worker --handler
package.module:function --queue email_jobs`` (or the ``taskforge-worker`` script). Exit codes: 0 after a clean shutdown,
1 when TaskForge refuses the API key, 2 for a bad setting.
"""

from __future__ import annotations

import sys

from taskforge_client.worker.apps import load_app
from taskforge_client.worker.config import PROG, ConfigError, load_config
from taskforge_client.worker.handlers import load_handler, prepare_django
from taskforge_client.worker.logs import configure_logging
from taskforge_client.worker.runner import Runner

__all__ = ["main", "script"]

SCRIPT = "taskforge-worker"


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """Run the worker with ``argv`` (default: the command line); returns the exit code."""
    try:
        config = load_config(argv, prog=prog)
        handler = load_handler(config.handler) if config.handler else None
        app = load_app(config.app) if config.app else None
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    if handler is None and app is None and config.django_settings:
        # A Django-tasks worker: load the project now, so a bad setting stops it at start.
        try:
            prepare_django()
        except Exception as exc:
            print(
                f"{prog}: error: cannot load DJANGO_SETTINGS_MODULE={config.django_settings}: "
                f"{type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            return 2
    configure_logging(config.log_format, config.log_level)
    if app is None:
        return Runner(config, handler).run()
    return Runner(config, None, tasks=app.tasks, queues=[config.queue] if config.queue else app.queues).run()


def script() -> int:
    """The ``taskforge-worker`` console script: ``main`` under the script's own name."""
    return main(prog=SCRIPT)
