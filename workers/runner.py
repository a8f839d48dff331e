"""Deprecated alias of the reference worker in ``taskforge_client.worker``, kept for one release.

The worker is part of the ``taskforge-client`` distribution now
(``clients/python/``): run ``python -m taskforge_client.worker`` and import
from ``taskforge_client.worker.config``, ``.runner``, ``.job``. This module
only re-exports those names and goes away in the next release.
"""

from taskforge_client.worker.cli import main
from taskforge_client.worker.config import Config, ConfigError, load_config
from taskforge_client.worker.handlers import DJANGO_TASK_KEY, Handler, load_handler
from taskforge_client.worker.job import Job
from taskforge_client.worker.logs import JsonLines, TextLines, configure_logging
from taskforge_client.worker.outcome import describe_exception
from taskforge_client.worker.runner import Runner

__all__ = [
    "DJANGO_TASK_KEY",
    "Config",
    "ConfigError",
    "Handler",
    "Job",
    "JsonLines",
    "Runner",
    "TextLines",
    "configure_logging",
    "describe_exception",
    "load_config",
    "load_handler",
    "main",
]
