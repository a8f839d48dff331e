"""The reference worker: claims tasks, runs a handler on them, reports back.

``python -m workers --handler package.module:function --queue email_jobs``

Standard library and httpx only (through ``workers.client``): it never imports
Django, except to run a Django ``@task`` payload, when ``workers.django_tasks``
is loaded on first use.

Threads, and why each exists:

1. The main thread claims: it long-polls for as many tasks as there are free
   slots (``concurrency`` minus the handlers running) and hands them to the pool.
2. ``concurrency`` pool threads run the handler, one task each. A handler's
   return value (a dict or None) becomes an ack; an exception a nack.
3. The reporter thread sends those acks and nacks. It takes everything that
   finished meanwhile at once, so a burst of finished tasks costs one
   ``ack/batch`` call, not one call per task, and a slow ack never holds up a
   pool thread.
4. The heartbeat thread extends the lease of every task in flight (still
   running, or finished with its ack not yet confirmed). A ``lease_lost``
   answer means another worker may be running the task: the runner sets
   ``job.cancelled`` and drops the task's outcome; it never acks it.

Shutdown (SIGTERM/SIGINT): claiming stops, running tasks get ``grace_seconds``
to finish and be acked, the rest are nacked with retry ("worker shutting
down", retry at once) and the process exits 0. A second signal skips the rest
of the grace period.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import math
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from workers.client import (
    ConnectionFailed,
    Forbidden,
    LeaseLost,
    NotFound,
    PayloadTooLarge,
    ServerError,
    TaskForgeClient,
    TaskForgeError,
    Unauthorized,
    Unavailable,
    ValidationError,
)
from workers.errors import Fail, Retry

logger = logging.getLogger("taskforge.worker")

# A payload holding this key is a Django ``@task`` call (see workers.django_tasks).
DJANGO_TASK_KEY = "django_task"
SHUTDOWN_ERROR = "worker shutting down"
MAX_ERROR_CHARS = 8000  # the protocol allows 65536; a traceback's tail is enough
MAX_BATCH = 100  # ack/nack batch limit of the protocol
MIN_HEARTBEAT_SECONDS = 0.2
REPORT_ATTEMPTS = 5
TICK_SECONDS = 0.1
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

Handler = Callable[[dict[str, Any], "Job"], Mapping[str, Any] | None]


# -- configuration ------------------------------------------------------------


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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workers",
        description="Run TaskForge tasks with a Python handler (or Django @task functions).",
        epilog="Flags override the environment variables named in brackets.",
    )
    add = parser.add_argument
    add(
        "--handler",
        help="package.module:function called as function(payload, job); without it, only Django @task payloads are run",
    )
    add("--queue", help="queue to work on (default: any unpaused queue) [QUEUE]")
    add("--concurrency", help="tasks run at once, 1-100 (default 4) [WORKER_CONCURRENCY]")
    add("--worker-id", help="this worker's id (default hostname-pid) [WORKER_ID]")
    add("--api-url", help="TaskForge base URL (default http://localhost:8080) [TASKFORGE_API_URL]")
    add("--poll-interval", help="seconds between claims when idle or after an error (default 1) [WORKER_POLL_INTERVAL]")
    add(
        "--heartbeat-interval",
        help="seconds between heartbeats of a running task (default 10; "
        "never more than a third of the lease) [HEARTBEAT_INTERVAL]",
    )
    add(
        "--request-timeout",
        help="HTTP timeout in seconds, must exceed --wait-seconds (default 15) [WORKER_REQUEST_TIMEOUT]",
    )
    add("--wait-seconds", help="long-poll wait of a claim, 0-30 (default 5) [WORKER_WAIT_SECONDS]")
    add(
        "--grace-seconds",
        help="on SIGTERM, how long running tasks may take to finish (default 30) [WORKER_GRACE_SECONDS]",
    )
    add("--log-format", help="json or text (default json) [WORKER_LOG_FORMAT]")
    add(
        "--log-level",
        help="DEBUG, INFO (a line per task start, outcome and ack), WARNING or ERROR (default INFO) [WORKER_LOG_LEVEL]",
    )
    return parser


def _pick(flag: str | None, environ: Mapping[str, str], name: str) -> str | None:
    if flag is not None:
        return flag
    value = environ.get(name, "").strip()
    return value or None


def _number(raw: str | None, default: float, label: str, *, minimum: float, maximum: float) -> float:
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{label} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or not minimum <= value <= maximum:
        raise ConfigError(f"{label} must be between {minimum:g} and {maximum:g}, got {raw!r}")
    return value


def _integer(raw: str | None, default: int, label: str, *, minimum: int, maximum: int) -> int:
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{label} must be a whole number, got {raw!r}") from None
    if not minimum <= value <= maximum:
        raise ConfigError(f"{label} must be between {minimum} and {maximum}, got {raw!r}")
    return value


def load_config(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Settings from the command line, then the environment, then defaults."""
    env = os.environ if environ is None else environ
    args = _parser().parse_args(argv)

    def pick(flag: str | None, name: str) -> str | None:
        return _pick(flag, env, name)

    api_url = pick(args.api_url, "TASKFORGE_API_URL") or "http://localhost:8080"
    if not api_url.startswith(("http://", "https://")):
        raise ConfigError(f"--api-url / TASKFORGE_API_URL must start with http:// or https://, got {api_url!r}")
    api_key = env.get("TASKFORGE_API_KEY", "").strip()
    if not api_key:
        raise ConfigError(
            "TASKFORGE_API_KEY is not set: create a worker key with "
            "`python manage.py create_api_key NAME --role worker` and export it"
        )
    worker_id = pick(args.worker_id, "WORKER_ID") or f"{socket.gethostname()}-{os.getpid()}"
    if len(worker_id) > 200:
        raise ConfigError("--worker-id / WORKER_ID must be at most 200 characters")
    wait_seconds = _integer(
        pick(args.wait_seconds, "WORKER_WAIT_SECONDS"), 5, "--wait-seconds / WORKER_WAIT_SECONDS", minimum=0, maximum=30
    )
    request_timeout = _number(
        pick(args.request_timeout, "WORKER_REQUEST_TIMEOUT"),
        15.0,
        "--request-timeout / WORKER_REQUEST_TIMEOUT",
        minimum=0.1,
        maximum=3600,
    )
    if request_timeout <= wait_seconds:
        raise ConfigError(
            f"--request-timeout / WORKER_REQUEST_TIMEOUT ({request_timeout:g}) must exceed the long-poll "
            f"wait --wait-seconds / WORKER_WAIT_SECONDS ({wait_seconds}), or every idle claim times out"
        )
    log_format = (pick(args.log_format, "WORKER_LOG_FORMAT") or "json").lower()
    if log_format not in ("json", "text"):
        raise ConfigError(f"--log-format / WORKER_LOG_FORMAT must be json or text, got {log_format!r}")
    log_level = (pick(args.log_level, "WORKER_LOG_LEVEL") or "INFO").upper()
    if log_level not in LOG_LEVELS:
        raise ConfigError(f"--log-level / WORKER_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
    handler = args.handler
    if handler is not None and ":" not in handler:
        raise ConfigError(f"--handler must look like package.module:function, got {handler!r}")
    return Config(
        api_url=api_url,
        api_key=api_key,
        worker_id=worker_id,
        queue=pick(args.queue, "QUEUE"),
        handler=handler,
        concurrency=_integer(
            pick(args.concurrency, "WORKER_CONCURRENCY"),
            4,
            "--concurrency / WORKER_CONCURRENCY",
            minimum=1,
            maximum=100,
        ),
        poll_interval=_number(
            pick(args.poll_interval, "WORKER_POLL_INTERVAL"),
            1.0,
            "--poll-interval / WORKER_POLL_INTERVAL",
            minimum=0.01,
            maximum=3600,
        ),
        heartbeat_interval=_number(
            pick(args.heartbeat_interval, "HEARTBEAT_INTERVAL"),
            10.0,
            "--heartbeat-interval / HEARTBEAT_INTERVAL",
            minimum=MIN_HEARTBEAT_SECONDS,
            maximum=86400,
        ),
        request_timeout=request_timeout,
        wait_seconds=wait_seconds,
        grace_seconds=_number(
            pick(args.grace_seconds, "WORKER_GRACE_SECONDS"),
            30.0,
            "--grace-seconds / WORKER_GRACE_SECONDS",
            minimum=0,
            maximum=86400,
        ),
        log_format=log_format,
        django_settings=env.get("DJANGO_SETTINGS_MODULE") or None,
        log_level=log_level,
    )


def load_handler(spec: str) -> Handler:
    module_name, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--handler {spec!r}: cannot import {module_name!r} ({exc})") from exc
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError(f"--handler {spec!r}: {module_name!r} has no attribute {attribute!r}")
    if not callable(target):
        raise ConfigError(f"--handler {spec!r} is not callable")
    return target


# -- logging ------------------------------------------------------------------

_RECORD_FIELDS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonLines(logging.Formatter):
    """One JSON object per line: time, level, message and the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in record.__dict__.items() if k not in _RECORD_FIELDS})
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextLines(logging.Formatter):
    """``time level message key=value ...`` for people reading a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{k}={v}" for k, v in record.__dict__.items() if k not in _RECORD_FIELDS)
        text = f"{self.formatTime(record)} {record.levelname:<7} {record.getMessage()} {extra}".rstrip()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure_logging(log_format: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonLines() if log_format == "json" else TextLines())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # One line per request from httpx would drown the task lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)


# -- jobs ---------------------------------------------------------------------


@dataclass
class Job:
    """What a handler gets besides the payload: the claimed task and a cancel flag.

    ``cancelled`` is set when the lease was lost (another worker may now run the
    task) or the shutdown grace period ran out: a long handler should check
    ``job.cancelled.is_set()`` (or wait on it instead of sleeping) and stop.
    """

    id: str
    queue: str
    payload: dict[str, Any]
    attempts: int
    max_retries: int
    worker_id: str
    lease_token: str | None
    task: dict[str, Any]
    cancelled: threading.Event = field(default_factory=threading.Event)


RUNNING, REPORTING, ABANDONED = "running", "reporting", "abandoned"


@dataclass
class Flight:
    """A claimed task from claim until its ack/nack is confirmed or it is dropped."""

    job: Job
    beat_interval: float
    next_beat: float
    started: float
    state: str = RUNNING
    lost: bool = False


@dataclass
class Outcome:
    flight: Flight
    ack: bool
    result: dict[str, Any] | None = None
    error: str = ""
    retry: bool = True
    retry_after_seconds: int | None = None

    def item(self) -> dict[str, Any]:
        job = self.flight.job
        if self.ack:
            return {"task_id": job.id, "lease_token": job.lease_token, "result": self.result}
        return {
            "task_id": job.id,
            "lease_token": job.lease_token,
            "error": self.error,
            "retry": self.retry,
            "retry_after_seconds": self.retry_after_seconds,
        }


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` on the first line (the dashboard's summary), then the traceback's tail."""
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    headline = f"{name}: {exc}" if str(exc) else name
    trace = "".join(traceback.format_exception(exc))
    room = MAX_ERROR_CHARS - len(headline) - 2
    return headline if room <= 0 else f"{headline}\n\n{trace[-room:]}"


def _lease_seconds(task: Mapping[str, Any]) -> float | None:
    """The lease length the server grants, from its own two timestamps (no clock skew)."""
    try:
        granted = datetime.fromisoformat(task["lease_expires_at"]) - datetime.fromisoformat(task["claimed_at"])
    except (KeyError, TypeError, ValueError):
        return None
    return granted.total_seconds()


# -- the runner ---------------------------------------------------------------


class Runner:
    def __init__(self, config: Config, handler: Handler | None, client: TaskForgeClient | None = None) -> None:
        self.config = config
        self.handler = handler
        self.client = client or TaskForgeClient(config.api_url, config.api_key, timeout=config.request_timeout)
        # One lock (never taken twice by a thread) guards _in_flight, _running and each Flight's state.
        self._lock = threading.Lock()
        self._slots = threading.Condition(self._lock)
        self._in_flight: dict[str, Flight] = {}
        # Handlers running now. A slot frees when its handler returns, not when the ack is
        # confirmed: the next claim overlaps the ack instead of waiting for it.
        self._running = 0
        self._work: queue.Queue[Flight | None] = queue.Queue()
        self._outcomes: queue.Queue[Outcome] = queue.Queue()
        self.stopping = threading.Event()
        self._stop_requested = 0.0  # monotonic time of the signal: the grace period counts from it
        self._hurry = threading.Event()
        self._threads_stop = threading.Event()
        self._django_runner: Callable[[Job], Any] | None = None

    # -- logging helpers

    def _log(self, level: int, event: str, message: str, job: Job | None = None, **fields: Any) -> None:
        extra: dict[str, Any] = {"event": event, "worker_id": self.config.worker_id}
        if job is not None:
            extra.update(task_id=job.id, queue=job.queue, attempt=job.attempts)
        extra.update(fields)
        logger.log(level, message, extra=extra)

    # -- entry point

    def run(self) -> int:
        """Work until SIGTERM/SIGINT (or ``stop()``); returns the process exit code."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        threads = [
            threading.Thread(target=self._pool_loop, name=f"pool-{n}", daemon=True)
            for n in range(self.config.concurrency)
        ]
        threads.append(threading.Thread(target=self._report_loop, name="reporter", daemon=True))
        threads.append(threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True))
        for thread in threads:
            thread.start()
        self._log(
            logging.INFO,
            "worker.start",
            "worker started",
            queue=self.config.queue,
            concurrency=self.config.concurrency,
            handler=self.config.handler,
            api_url=self.config.api_url,
        )
        if self.handler is None and not self.config.django_settings:
            self._log(
                logging.WARNING,
                "worker.no_handler",
                "no --handler and no DJANGO_SETTINGS_MODULE: every task will fail until one is given",
            )
        code = 0
        try:
            self._claim_loop()
        except (Unauthorized, Forbidden) as exc:
            self._log(logging.ERROR, "worker.auth", f"TaskForge refused this worker's key: {exc}")
            code = 1
        self._drain()
        self._threads_stop.set()
        for _ in range(self.config.concurrency):
            self._work.put(None)
        self.client.close()
        self._log(logging.INFO, "worker.stop", "worker stopped", exit_code=code)
        return code

    def stop(self) -> None:
        if not self.stopping.is_set():
            self._stop_requested = time.monotonic()
        self.stopping.set()

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.stopping.is_set():
            self._hurry.set()  # a second signal: no more grace
            return
        self._log(logging.INFO, "worker.stopping", f"received {signal.Signals(signum).name}: draining")
        self.stop()

    # -- 1. claiming (main thread)

    def _claim_loop(self) -> None:
        while not self.stopping.is_set():
            with self._slots:
                free = self.config.concurrency - self._running
                if free <= 0:
                    self._slots.wait(TICK_SECONDS)
                    continue
            asked = time.monotonic()
            try:
                tasks = self.client.claim(
                    self.config.worker_id,
                    self.config.queue,
                    max_tasks=min(free, MAX_BATCH),
                    wait_seconds=self.config.wait_seconds,
                )
            except (Unauthorized, Forbidden):
                raise
            except TaskForgeError as exc:
                self._log(logging.WARNING, "claim.error", f"claim failed: {exc}", queue=self.config.queue)
                self.stopping.wait(self.config.poll_interval)
                continue
            if self.stopping.is_set():
                # Claimed while the signal arrived: hand them straight back.
                self._give_back([self._flight(task) for task in tasks])
                return
            for task in tasks:
                flight = self._flight(task)
                with self._lock:
                    self._in_flight[flight.job.id] = flight
                    self._running += 1
                self._work.put(flight)
            if not tasks and time.monotonic() - asked < self.config.wait_seconds / 2:
                # An empty answer that did not wait (short polling, a paused queue): pause.
                # After a full long poll the server has waited already: ask again at once.
                self.stopping.wait(self.config.poll_interval)

    def _flight(self, task: dict[str, Any]) -> Flight:
        job = Job(
            id=str(task["id"]),
            queue=str(task.get("queue", self.config.queue or "")),
            payload=task.get("payload") or {},
            attempts=int(task.get("attempts") or 1),
            max_retries=int(task.get("max_retries") or 0),
            worker_id=self.config.worker_id,
            lease_token=task.get("lease_token"),
            task=task,
        )
        interval = self.config.heartbeat_interval
        lease = _lease_seconds(task)
        if lease:
            # Several beats per lease, so one slow or lost heartbeat does not cost the task.
            interval = max(MIN_HEARTBEAT_SECONDS, min(interval, lease / 3))
        now = time.monotonic()
        return Flight(job=job, beat_interval=interval, next_beat=now + interval, started=now)

    # -- 2. running (pool threads)

    def _pool_loop(self) -> None:
        while True:
            flight = self._work.get()
            if flight is None:
                return
            self._execute(flight)

    def _execute(self, flight: Flight) -> None:
        job = flight.job
        self._log(logging.INFO, "task.start", "task started", job)
        try:
            value = self._call(job)
            outcome = Outcome(flight, ack=True, result=_checked_result(value))
        except Retry as exc:
            outcome = Outcome(flight, ack=False, error=_own_message(exc), retry_after_seconds=exc.after)
        except Fail as exc:
            outcome = Outcome(flight, ack=False, error=_own_message(exc), retry=False)
        except BaseException as exc:  # a handler's SystemExit must not kill a pool thread either
            outcome = Outcome(flight, ack=False, error=describe_exception(exc))
        elapsed_ms = round((time.monotonic() - flight.started) * 1000)
        with self._slots:
            self._running -= 1
            self._slots.notify_all()
            if flight.state == ABANDONED:
                dropped = "the shutdown grace period had run out (it was nacked)"
            elif flight.lost:
                dropped = "its lease was lost (another worker may run it)"
            else:
                dropped = ""
                flight.state = REPORTING
        if dropped:
            self._forget(flight)  # frees the slot: this pool thread is free again
            message = f"task finished but {dropped}: outcome dropped"
            self._log(logging.WARNING, "task.dropped", message, job, duration_ms=elapsed_ms)
            return
        if outcome.ack:
            self._log(logging.INFO, "task.succeeded", "task succeeded", job, duration_ms=elapsed_ms)
        else:
            self._log(
                logging.WARNING,
                "task.failed",
                f"task failed: {outcome.error.splitlines()[0] if outcome.error else ''}",
                job,
                duration_ms=elapsed_ms,
                retry=outcome.retry,
                retry_after_seconds=outcome.retry_after_seconds,
            )
        self._outcomes.put(outcome)

    def _call(self, job: Job) -> Any:
        if isinstance(job.payload.get(DJANGO_TASK_KEY), dict):
            if self._django_runner is None:
                # Loaded on first use only: plain workers never import Django.
                self._django_runner = importlib.import_module("workers.django_tasks").run_job
            return self._django_runner(job)
        if self.handler is None:
            raise LookupError("this worker has no --handler and the payload is not a Django task")
        return self.handler(job.payload, job)

    # -- 3. reporting (reporter thread)

    def _report_loop(self) -> None:
        while True:
            try:
                batch = [self._outcomes.get(timeout=TICK_SECONDS)]
            except queue.Empty:
                if self._threads_stop.is_set():
                    return
                continue
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._outcomes.get_nowait())
                except queue.Empty:
                    break
            for ack in (True, False):
                same = [outcome for outcome in batch if outcome.ack is ack]
                if same:
                    self._report(same)

    def _report(self, outcomes: list[Outcome]) -> None:
        kind = "ack" if outcomes[0].ack else "nack"
        for attempt in range(REPORT_ATTEMPTS):
            try:
                if len(outcomes) == 1:
                    self._report_one(outcomes[0])
                else:
                    self._report_batch(outcomes)
                return
            except (ConnectionFailed, Unavailable, ServerError) as exc:
                # The heartbeat thread keeps these leases alive while we retry; a
                # repeated ack is answered 200 and a repeated nack lease_lost, so a
                # 500 (which may have come after the commit) is retried too.
                self._log(logging.WARNING, f"{kind}.retry", f"{kind} failed, retrying: {exc}", count=len(outcomes))
                time.sleep(min(8.0, 0.5 * 2**attempt))
            except TaskForgeError as exc:
                self._log(logging.ERROR, f"{kind}.error", f"{kind} refused: {exc}", count=len(outcomes))
                break
        else:
            self._log(
                logging.ERROR,
                f"{kind}.gave_up",
                f"could not {kind}; the leases will expire and the tasks run again",
                count=len(outcomes),
            )
        for outcome in outcomes:
            self._forget(outcome.flight)

    def _report_one(self, outcome: Outcome) -> None:
        job = outcome.flight.job
        try:
            if outcome.ack:
                self.client.ack(job.worker_id, job.id, job.lease_token, outcome.result)
            else:
                self.client.nack(
                    job.worker_id,
                    job.id,
                    outcome.error,
                    job.lease_token,
                    retry=outcome.retry,
                    retry_after_seconds=outcome.retry_after_seconds,
                )
        except (LeaseLost, NotFound) as exc:
            self._lease_lost_on_report(outcome, exc.code)
        except (ValidationError, PayloadTooLarge) as exc:
            if not outcome.ack:
                raise
            # The result itself was refused (too big, say): the attempt failed.
            self._report_one(Outcome(outcome.flight, ack=False, error=f"result refused by TaskForge: {exc}"))
            return
        else:
            kind = "ack" if outcome.ack else "nack"
            self._log(logging.INFO, f"task.{kind}ed", f"{kind} confirmed", job)
        self._forget(outcome.flight)

    def _report_batch(self, outcomes: list[Outcome]) -> None:
        worker_id = self.config.worker_id
        items = [outcome.item() for outcome in outcomes]
        try:
            if outcomes[0].ack:
                results = self.client.ack_batch(worker_id, items)
            else:
                results = self.client.nack_batch(worker_id, items)
        except (ValidationError, PayloadTooLarge):
            # One bad item refuses the whole batch: judge each alone.
            for outcome in outcomes:
                self._report_one(outcome)
            return
        kind = "ack" if outcomes[0].ack else "nack"
        self._log(logging.INFO, f"{kind}.batch", f"{kind} batch of {len(outcomes)} sent", count=len(outcomes))
        for outcome, answer in zip(outcomes, results, strict=True):
            error = answer.get("error")
            if error:
                self._lease_lost_on_report(outcome, error.get("code", "error"))
            else:
                self._log(logging.INFO, f"task.{kind}ed", f"{kind} confirmed", outcome.flight.job, batch=len(outcomes))
            self._forget(outcome.flight)

    def _lease_lost_on_report(self, outcome: Outcome, code: str) -> None:
        self._log(
            logging.WARNING,
            "task.lease_lost",
            f"{'ack' if outcome.ack else 'nack'} answered {code}: the task is no longer ours, dropped",
            outcome.flight.job,
        )
        self._forget(outcome.flight)

    def _forget(self, flight: Flight) -> None:
        with self._slots:
            if self._in_flight.get(flight.job.id) is flight:
                del self._in_flight[flight.job.id]
                self._slots.notify_all()

    # -- 4. heartbeats (heartbeat thread)

    def _heartbeat_loop(self) -> None:
        while not self._threads_stop.wait(TICK_SECONDS):
            now = time.monotonic()
            with self._lock:
                due = [
                    f for f in self._in_flight.values() if f.next_beat <= now and not f.lost and f.state != ABANDONED
                ]
            for flight in due:
                self._beat(flight)

    def _beat(self, flight: Flight) -> None:
        job = flight.job
        try:
            self.client.heartbeat(job.worker_id, job.id, job.lease_token)
        except (LeaseLost, NotFound) as exc:
            with self._lock:
                if self._in_flight.get(job.id) is not flight:
                    return  # acked (or handed back) while this beat was on its way: nothing was lost
                flight.lost = True
            job.cancelled.set()
            self._log(logging.WARNING, "task.lease_lost", f"heartbeat answered {exc.code}: stop working on it", job)
            return
        except TaskForgeError as exc:
            self._log(logging.WARNING, "heartbeat.error", f"heartbeat failed, trying again soon: {exc}", job)
            flight.next_beat = time.monotonic() + min(1.0, flight.beat_interval)
            return
        flight.next_beat = time.monotonic() + flight.beat_interval

    # -- shutdown

    def _drain(self) -> None:
        """Let running tasks finish within the grace period; hand back the rest."""
        # A claim in flight when the signal came may have used some of the grace period.
        deadline = (self._stop_requested or time.monotonic()) + self.config.grace_seconds
        with self._slots:
            while self._in_flight and time.monotonic() < deadline and not self._hurry.is_set():
                self._slots.wait(TICK_SECONDS)
            late = [f for f in self._in_flight.values() if f.state == RUNNING]
            for flight in late:
                flight.state = ABANDONED
                flight.job.cancelled.set()
                del self._in_flight[flight.job.id]
        self._give_back(late)
        # Outcomes already handed to the reporter: give their acks a bounded moment.
        settle = time.monotonic() + self.config.request_timeout
        with self._slots:
            while self._in_flight and time.monotonic() < settle:
                self._slots.wait(TICK_SECONDS)

    def _give_back(self, flights: list[Flight]) -> None:
        """Nack tasks this worker will not finish, to be retried at once by another worker."""
        for start in range(0, len(flights), MAX_BATCH):
            chunk = flights[start : start + MAX_BATCH]
            items = [
                Outcome(f, ack=False, error=SHUTDOWN_ERROR, retry=True, retry_after_seconds=0).item() for f in chunk
            ]
            try:
                results = self.client.nack_batch(self.config.worker_id, items)
            except TaskForgeError as exc:
                self._log(logging.ERROR, "shutdown.nack_error", f"could not hand tasks back: {exc}", count=len(chunk))
                continue
            for flight, answer in zip(chunk, results, strict=True):
                outcome = answer.get("error", {}).get("code") or answer.get("status")
                self._log(logging.WARNING, "task.handed_back", f"{SHUTDOWN_ERROR}: task nacked ({outcome})", flight.job)


def _checked_result(value: Any) -> dict[str, Any] | None:
    """A handler's return value must be a JSON object (or None): check it before the ack."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"handler returned {type(value).__name__}; expected a dict (JSON object) or None")
    result = dict(value)
    json.dumps(result, allow_nan=False)  # TypeError/ValueError here is a failed attempt, not a failed batch
    return result


def _own_message(exc: BaseException) -> str:
    message = str(exc) or type(exc).__name__
    if exc.__cause__ is not None:
        message += f" (caused by {type(exc.__cause__).__name__}: {exc.__cause__})"
    return message[:MAX_ERROR_CHARS]


def main(argv: list[str] | None = None) -> int:
    try:
        config = load_config(argv)
        handler = load_handler(config.handler) if config.handler else None
    except ConfigError as exc:
        print(f"python -m workers: error: {exc}", file=sys.stderr)
        return 2
    if handler is None and config.django_settings:
        # A Django-tasks worker: load the project now, so a bad setting stops it at start.
        try:
            importlib.import_module("workers.django_tasks").setup_django()
        except Exception as exc:
            print(
                f"python -m workers: error: cannot load DJANGO_SETTINGS_MODULE={config.django_settings}: "
                f"{type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            return 2
    configure_logging(config.log_format, config.log_level)
    return Runner(config, handler).run()
