"""The reference worker's settings, each declared once, as data.

Every setting in ``SETTINGS`` names its flag, its environment variable, its
default, its range and its help; the command line (``argparse``) and the
validation are both built from that list, so the three can never disagree.
A flag wins over its variable, a variable over the default, and a blank
variable counts as unset. A bad value is a ``ConfigError`` naming both the
flag and the variable, raised before anything connects.
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SETTINGS", "Config", "ConfigError", "Setting", "build_parser", "load_config"]

PROG = "python -m taskforge_client.worker"
# The heartbeat thread wakes every 0.1 s: a shorter interval could not be kept.
MIN_HEARTBEAT_SECONDS = 0.2
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# Measured on a no-op backlog: 4 handlers x 25 = claims of up to 100, the most one claim may ask (docs/workers.md).
DEFAULT_PREFETCH = 25
# Measured on a stream of single enqueues (make bench, W8): 0.05 s lets a claim gather the tasks of
# the stream instead of one claim per task; more gained little (docs/workers.md).
DEFAULT_CLAIM_COOLDOWN = 0.05


class ConfigError(Exception):
    """A bad setting; the message names the flag and the environment variable."""


@dataclass(frozen=True)
class Config:
    api_url: str
    api_key: str
    worker_id: str
    queue: str | None
    handler: str | None
    concurrency: int
    poll_interval: float
    heartbeat_interval: float
    request_timeout: float
    wait_seconds: int
    grace_seconds: float
    log_format: str
    django_settings: str | None
    log_level: str = "INFO"
    prefetch: int = DEFAULT_PREFETCH
    summary_interval: float = 30.0
    app: str | None = None
    claim_cooldown: float = DEFAULT_CLAIM_COOLDOWN


def _default_worker_id() -> str:
    """``hostname-pid-6 hex``: in containers every worker is pid 1 and hostnames repeat, the suffix does not."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


# Rules for text settings: what is wrong with the value (said after the setting's name), or None.


def _http_url(value: str) -> str | None:
    return None if value.startswith(("http://", "https://")) else f"must start with http:// or https://, got {value!r}"


def _at_most_200_characters(value: str) -> str | None:
    return None if len(value) <= 200 else "must be at most 200 characters"


def _module_colon_function(value: str) -> str | None:
    return None if ":" in value else f"must look like package.module:function, got {value!r}"


@dataclass(frozen=True)
class Setting:
    """One setting: where it is read from, what it defaults to, what values it takes.

    ``kind`` is ``str``, ``int`` or ``float``. Numbers must lie within
    ``minimum``..``maximum``; a text with ``choices`` must be one of them
    (case-insensitive, stored in the choices' spelling); ``rule`` returns what
    is wrong with a text, or None. ``required`` is the message for a setting
    that has no value and no default.
    """

    name: str
    flag: str | None
    env: str | None
    help: str
    kind: type[str] | type[int] | type[float] = str
    default: str | int | float | None = None
    default_factory: Callable[[], str] | None = None
    shown_default: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    rule: Callable[[str], str | None] | None = None
    required: str | None = None

    @property
    def label(self) -> str:
        """How messages name it: ``--concurrency / WORKER_CONCURRENCY``."""
        return " / ".join(name for name in (self.flag, self.env) if name)

    def help_text(self) -> str:
        """``help, 1-100 (default 4) [WORKER_CONCURRENCY]``: what ``--help`` says of it."""
        text = self.help
        if self.kind is int and self.minimum is not None and self.maximum is not None:
            text += f", {self.minimum:g}-{self.maximum:g}"
        shown = self.shown_default
        if shown is None and self.default is not None:
            shown = f"{self.default:g}" if isinstance(self.default, float) else str(self.default)
        if shown is not None:
            text += f" (default {shown})"
        return f"{text} [{self.env}]" if self.env else text

    def parse(self, raw: str | None) -> Any:
        """The typed value of ``raw`` (None: not given), or ``ConfigError``."""
        if raw is None:
            if self.required:
                raise ConfigError(self.required)
            return self.default_factory() if self.default_factory else self.default
        if self.kind is int or self.kind is float:
            return self._number(raw)
        if self.choices:
            return self._choice(raw)
        problem = self.rule(raw) if self.rule else None
        if problem:
            raise ConfigError(f"{self.label} {problem}")
        return raw

    def _number(self, raw: str) -> int | float:
        try:
            value = int(raw) if self.kind is int else float(raw)
        except ValueError:
            what = "a whole number" if self.kind is int else "a number"
            raise ConfigError(f"{self.label} must be {what}, got {raw!r}") from None
        low = -math.inf if self.minimum is None else self.minimum
        high = math.inf if self.maximum is None else self.maximum
        if not math.isfinite(value) or not low <= value <= high:
            raise ConfigError(f"{self.label} must be between {low:g} and {high:g}, got {raw!r}")
        return value

    def _choice(self, raw: str) -> str:
        by_key = {choice.lower(): choice for choice in self.choices}
        if raw.lower() in by_key:
            return by_key[raw.lower()]
        allowed = " or ".join(self.choices) if len(self.choices) == 2 else "one of " + ", ".join(self.choices)
        shown = raw.upper() if all(choice.isupper() for choice in self.choices) else raw.lower()
        raise ConfigError(f"{self.label} must be {allowed}, got {shown!r}")


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "app",
        "--app",
        "TASKFORGE_APP",
        "package.module (or package.module:app) holding @app.task functions: each task runs the function "
        "its kind names, claimed from the queues those functions use; also the first positional argument",
    ),
    Setting(
        "handler",
        "--handler",
        None,
        "package.module:function called as function(payload, job); without it, only Django @task payloads are run",
        rule=_module_colon_function,
    ),
    Setting("queue", "--queue", "QUEUE", "queue to work on", shown_default="any unpaused queue"),
    Setting("concurrency", "--concurrency", "WORKER_CONCURRENCY", "tasks run at once", int, 4, minimum=1, maximum=100),
    Setting(
        "prefetch",
        "--prefetch",
        "WORKER_PREFETCH",
        "tasks held per handler thread: claims fetch up to concurrency x prefetch tasks (100 per claim, "
        "which the defaults fill), so a handler that returns finds its next task waiting; fewer are held "
        "while tasks take long (about a second of work), and 1 holds none beyond the running ones",
        int,
        DEFAULT_PREFETCH,
        minimum=1,
        maximum=100,
    ),
    Setting(
        "worker_id",
        "--worker-id",
        "WORKER_ID",
        "this worker's id, unique per process",
        default_factory=_default_worker_id,
        shown_default="hostname-pid-<6 random hex>",
        rule=_at_most_200_characters,
    ),
    Setting(
        "api_url",
        "--api-url",
        "TASKFORGE_API_URL",
        "TaskForge base URL",
        default="http://localhost:8080",
        rule=_http_url,
    ),
    Setting(
        "api_key",
        None,  # never a flag: ``ps`` shows argv to every user
        "TASKFORGE_API_KEY",
        "a worker (or admin) API key",
        required="TASKFORGE_API_KEY is not set: create a worker key with "
        "`python manage.py create_api_key NAME --role worker` and export it",
    ),
    Setting(
        "poll_interval",
        "--poll-interval",
        "WORKER_POLL_INTERVAL",
        "seconds between claims when idle or after an error",
        float,
        1.0,
        minimum=0.01,
        maximum=3600,
    ),
    Setting(
        "claim_cooldown",
        "--claim-cooldown",
        "WORKER_CLAIM_COOLDOWN",
        "after a claim that got some tasks but fewer than it asked for, seconds from its start before the "
        "next claim, so a stream of tasks is claimed in batches rather than one claim per task; a long poll "
        "that waited for its tasks has used the time already, and 0 claims again at once",
        float,
        DEFAULT_CLAIM_COOLDOWN,
        minimum=0,
        maximum=60,
    ),
    Setting(
        "heartbeat_interval",
        "--heartbeat-interval",
        "HEARTBEAT_INTERVAL",
        "seconds between heartbeats of a running task, never more than a third of the lease",
        float,
        10.0,
        minimum=MIN_HEARTBEAT_SECONDS,
        maximum=86400,
    ),
    Setting(
        "request_timeout",
        "--request-timeout",
        "WORKER_REQUEST_TIMEOUT",
        "HTTP timeout in seconds, must exceed --wait-seconds",
        float,
        15.0,
        minimum=0.1,
        maximum=3600,
    ),
    Setting(
        "wait_seconds",
        "--wait-seconds",
        "WORKER_WAIT_SECONDS",
        "long-poll wait of a claim",
        int,
        5,
        minimum=0,
        maximum=30,
    ),
    Setting(
        "grace_seconds",
        "--grace-seconds",
        "WORKER_GRACE_SECONDS",
        "on SIGTERM, how long running tasks may take to finish; unfinished ones are then handed back "
        "and the process exits within 5 s more",
        float,
        30.0,
        minimum=0,
        maximum=86400,
    ),
    Setting(
        "log_format",
        "--log-format",
        "WORKER_LOG_FORMAT",
        "log lines in json or text",
        default="json",
        choices=("json", "text"),
    ),
    Setting(
        "log_level",
        "--log-level",
        "WORKER_LOG_LEVEL",
        "DEBUG (a line per task start, outcome and ack), INFO (start, stop, a summary every "
        "--summary-interval seconds, failures), WARNING or ERROR",
        default="INFO",
        choices=LOG_LEVELS,
    ),
    Setting(
        "summary_interval",
        "--summary-interval",
        "WORKER_SUMMARY_INTERVAL",
        "seconds between INFO summary lines (tasks done, retried, dead, lost, rate); none while idle, 0 for none",
        float,
        30.0,
        minimum=0,
        maximum=86400,
    ),
    Setting("django_settings", None, "DJANGO_SETTINGS_MODULE", "run Django @task payloads of this project"),
)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command line: one flag per setting that has one."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run TaskForge tasks: the @app.task functions of an app module by kind, "
        "a --handler function, or Django @task functions.",
        epilog="Flags override the environment variables named in brackets. "
        "TASKFORGE_API_KEY (required) and DJANGO_SETTINGS_MODULE are read from the environment only.",
    )
    for setting in SETTINGS:
        if setting.flag:
            parser.add_argument(setting.flag, dest=setting.name, help=setting.help_text())
    parser.add_argument(
        "app_module", nargs="?", metavar="APP", help="the module holding the @app.task functions (same as --app)"
    )
    return parser


def load_config(argv: list[str] | None = None, environ: Mapping[str, str] | None = None, *, prog: str = PROG) -> Config:
    """Settings from the command line, then the environment, then defaults."""
    env = os.environ if environ is None else environ
    flags = vars(build_parser(prog).parse_args(argv))
    positional = flags.pop("app_module")
    if positional is not None:
        if flags.get("app") not in (None, positional):
            raise ConfigError(f"two apps given: {positional!r} and --app {flags['app']!r}; give one")
        flags["app"] = positional
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        raw = flags.get(setting.name)
        if raw is None and setting.env:
            raw = env.get(setting.env, "").strip() or None
        values[setting.name] = setting.parse(raw)
    config = Config(**values)
    if config.app and config.handler:
        raise ConfigError(
            "give an app module (tasks run by kind) or --handler (one function runs every task), not both"
        )
    if config.request_timeout <= config.wait_seconds:
        raise ConfigError(
            f"--request-timeout / WORKER_REQUEST_TIMEOUT ({config.request_timeout:g}) must exceed the long-poll "
            f"wait --wait-seconds / WORKER_WAIT_SECONDS ({config.wait_seconds}), or every idle claim times out"
        )
    return config
