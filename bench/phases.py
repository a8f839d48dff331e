"""PHASES: where the CPU of one single enqueue goes inside an API process.

``make bench-phases`` (``python -m bench.phases [REQUESTS]`` with the
project's interpreter) makes a database of its own on the server of
``DATABASE_URL`` (``taskforge_bench_phases``, dropped at the end) and uses
the bench's Redis DB, then, in this one process, sends single enqueues
straight into the ASGI application gunicorn serves (``taskforge.asgi``):
the lean edge, the statement on the event loop's pool, the Redis announce,
the log lines and the request metrics all run as in production; only the
HTTP server (uvicorn's parsing and socket writes) is left out.

Each phase is the CPU time of the event loop's thread (``time.thread_time``)
inside the functions named in ``PHASES``, wrapped for the measure and put
back after it, divided by the requests. What the process spent outside the
wrapped functions is reported as remainders: the event loop's (routing,
the body, the ASGI messages, the pool's checkout and return, the futures)
and the process's other threads'. A sampling profiler attributes time a thread spends waiting in C
(libpq, the socket) to the function that waits; thread CPU time does not,
which is why this measure exists beside ``make bench``'s py-spy profiles.
The log lines are formatted and written as always, to ``/dev/null`` (a
pipe or a file costs one write more); the event loop's remainder includes
this driver's own few microseconds per request.

``python -m bench.phases --http [REQUESTS]`` adds what the phases leave
out: it sends the same enqueues, one at a time over one keep-alive
connection, to one gunicorn worker serving the same application
(``gunicorn.conf.py``), and reports that worker's user and system CPU per
enqueue from ``/proc`` beside the in-process figures: the difference is the
HTTP server (uvicorn's parsing and protocol, the socket reads and writes)
and the process around the application.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

QUEUE = "bench_phases"
DEFAULT_REQUESTS = 3_000
WARM_UP_REQUESTS = 200


@dataclass(frozen=True)
class Phase:
    """``label``: the thread CPU inside ``owner.attribute`` (a module, a class or an object, by dotted name).

    A coroutine function is timed from its call to its end: the driver sends
    one request at a time, so what the event loop's thread spends meanwhile is
    that request's.
    """

    label: str
    owner: str
    attribute: str


# In the order a single enqueue meets them, all on the event loop's thread. None of them calls another
# (each is counted once).
PHASES = (
    Phase("API key check (cached)", "queues.api.hot", "authorize"),
    Phase("queue lookup (cached)", "queues.api.hot", "queue_or_404"),
    Phase("body validation", "queues.api.views", "validate_enqueue"),
    # The empty query goes only when owed (taskforge.infra.postgres.checkout): one after a quiet second
    # is counted in "the rest".
    Phase("health check of the connection taken", "taskforge.infra.postgres.checkout", "needs_ping"),
    Phase("the INSERT, prepared, in autocommit", "queues.lifecycle.rows", "fetch_rows_on"),
    Phase("Redis lane and doorbell", "queues.dispatch.announce", "announce_on_loop"),
    Phase("transition log line and counters", "queues.telemetry.observe", "transitions_on_loop"),
    Phase("access log line", "taskforge.http.lean", "log_access"),
    Phase("request metrics", "taskforge.http.lean", "record_request"),
)
# The process's other threads meanwhile: the metrics writer, the key and queue cache's change watch,
# the connection pools' own workers.
OTHER_THREADS = "other threads (metrics writer, cache change watch, connection pools)"


def _owner(dotted: str) -> Any:
    """A module, or a class or object inside one (``package.module.name``)."""
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError:
        module, _, name = dotted.rpartition(".")
        return getattr(importlib.import_module(module), name)


@contextlib.contextmanager
def timed(phases: tuple[Phase, ...]) -> Iterator[dict[str, float]]:
    """Wrap each phase's function to add its thread CPU seconds to the dict yielded; unwrap after."""
    spent = {phase.label: 0.0 for phase in phases}
    restore: list[tuple[Any, str, Any | None]] = []  # None: the wrapper shadows a class's method on an object

    def wrapper(label: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                spent[label] += time.thread_time() - started

        async def run_awaited(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return await original(*args, **kwargs)
            finally:
                spent[label] += time.thread_time() - started

        return run_awaited if inspect.iscoroutinefunction(original) else run

    try:
        for phase in phases:
            owner = _owner(phase.owner)
            own = phase.attribute in vars(owner)
            # AttributeError: the code moved, and PHASES must follow it.
            original = vars(owner)[phase.attribute] if own else getattr(owner, phase.attribute)
            restore.append((owner, phase.attribute, original if own else None))
            setattr(owner, phase.attribute, wrapper(phase.label, original))
        yield spent
    finally:
        for owner, attribute, original in reversed(restore):
            if original is None:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, original)


def _scope(key: str, body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"/queues/{QUEUE}/tasks",
        "raw_path": f"/queues/{QUEUE}/tasks".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Bearer {key}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"user-agent", b"bench-phases"),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }


async def _enqueue(application: Any, scope: dict[str, Any], body: bytes) -> int:
    """One request through the ASGI application; its status."""
    received = False
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never leaves
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await application(dict(scope), receive, send)
    return status[0]


async def measure(application: Any, key: str, requests: int) -> dict[str, float]:
    """Microseconds of CPU per enqueue: each phase, the two remainders and the process in all.

    Needs Django set up, a queue named ``QUEUE`` and ``key`` a producer key.
    The event loop's Postgres pool is closed at the end, as the API process closes it.
    """
    from taskforge.infra.postgres import aio

    body = orjson.dumps({"payload": {"n": 1}})
    scope = _scope(key, body)
    try:
        for _ in range(WARM_UP_REQUESTS):
            await _expect_created(application, scope, body)
        with timed(PHASES) as spent:
            before = resource.getrusage(resource.RUSAGE_SELF)
            loop_started = time.thread_time()  # this coroutine runs on the event loop's thread
            for _ in range(requests):
                await _expect_created(application, scope, body)
            loop = time.thread_time() - loop_started
            after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        await aio.close()
    process = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    seconds = {phase.label: spent[phase.label] for phase in PHASES}
    seconds["event loop, the rest"] = loop - sum(seconds.values())
    seconds[OTHER_THREADS] = process - loop
    seconds["the process, in all"] = process
    return {label: value / requests * 1e6 for label, value in seconds.items()}


async def _expect_created(application: Any, scope: dict[str, Any], body: bytes) -> None:
    status = await _enqueue(application, scope, body)
    if status != 201:
        raise RuntimeError(f"an enqueue was answered {status}, not 201")


async def _quietly(stream: Any, work: Any) -> Any:
    """``work``, with the root logger's stream handlers (standard output) writing to ``stream``."""
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
    previous = [handler.setStream(stream) for handler in handlers]
    try:
        return await work
    finally:
        for handler, old in zip(handlers, previous, strict=True):
            if old is not None:
                handler.setStream(old)


def table(figures: dict[str, float]) -> str:
    total = figures["the process, in all"]
    lines = ["| Phase | µs per enqueue | Share |", "| --- | ---: | ---: |"]
    lines += [f"| {label} | {value:.0f} | {value / total:.0%} |" for label, value in figures.items()]
    return "\n".join(lines)


@contextlib.contextmanager
def one_worker() -> Iterator[tuple[str, int]]:
    """One gunicorn worker serving the application on this process's environment: its URL and pid."""
    from taskforge.dev import launcher

    port = launcher.free_port()
    spec = launcher.api_server(host="127.0.0.1", port=port, workers=1)
    with tempfile.NamedTemporaryFile(prefix="taskforge-phases-http-", suffix=".log") as log:
        server = launcher.spawn(spec.argv, spec.environ(os.environ), log=Path(log.name), own_group=True)
        try:
            url = f"http://127.0.0.1:{port}"
            launcher.wait_ready(url, process=server, output=lambda: Path(log.name).read_text()[-3000:])
            (worker,) = launcher.child_pids(server.pid)
            yield url, worker
        finally:
            launcher.terminate(server, grace=10, group=True)


def over_http(url: str, worker: int, key: str, requests: int) -> dict[str, float]:
    """Single enqueues sent one at a time over one keep-alive connection: ``worker``'s CPU per enqueue, in µs.

    ``url`` is served by the one gunicorn worker ``worker``; ``key`` is a
    producer key and the queue ``QUEUE`` exists.
    """
    import httpx

    from bench.stack import user_and_system_seconds

    body = orjson.dumps({"payload": {"n": 1}})
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    # httpx logs each request at INFO: in this process, through the project's logging, a line per enqueue.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:

        def enqueue() -> None:
            answer = client.post(f"/queues/{QUEUE}/tasks", content=body)
            if answer.status_code != 201:
                raise RuntimeError(f"an enqueue was answered {answer.status_code}, not 201")

        for _ in range(WARM_UP_REQUESTS):
            enqueue()
        user_before, system_before = user_and_system_seconds(worker)
        for _ in range(requests):
            enqueue()
        user, system = user_and_system_seconds(worker)
    per_enqueue = 1e6 / requests
    user, system = (user - user_before) * per_enqueue, (system - system_before) * per_enqueue
    return {"user": user, "system": system, "in all": user + system}


def http_table(served: dict[str, float], in_process: dict[str, float]) -> str:
    """The worker's CPU per enqueue over HTTP, and how much more than the application's in-process figure."""
    extra = served["in all"] - in_process["the process, in all"]
    return "\n".join(
        [
            "| Over HTTP | µs per enqueue |",
            "| --- | ---: |",
            f"| user | {served['user']:.0f} |",
            f"| system | {served['system']:.0f} |",
            f"| the worker process, in all | {served['in all']:.0f} |",
            f"| more than in-process (the HTTP server and the process around the application) | {extra:.0f} |",
        ]
    )


def _prepare(server_database_url: str, server_redis_url: str) -> str:
    """A fresh database and the bench's Redis DB, named in this process's environment; the database's name."""
    import redis

    from bench.config import Config
    from bench.stack import create_database, database_url_for, redis_url_for_db

    cfg = Config()
    name = f"{cfg.database}_phases"
    create_database(server_database_url, name)
    redis_url = redis_url_for_db(server_redis_url, cfg.redis_db)
    redis.Redis.from_url(redis_url).flushdb()
    os.environ["DATABASE_URL"] = database_url_for(server_database_url, name)
    os.environ["REDIS_URL"] = redis_url
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-not-secret")
    # As gunicorn runs it (taskforge.dev.launcher): request metrics shared through files.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="taskforge-phases-")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "taskforge.settings")
    return name


def _drop(name: str, server_database_url: str) -> None:
    from django.db import connections

    from bench.stack import drop_database

    connections.close_all()
    drop_database(server_database_url, name)


def _application_and_key() -> tuple[Any, str]:
    """Django set up on the fresh database, migrated, with the queue and a producer key; the ASGI app."""
    import django
    from django.core.management import call_command

    django.setup(set_prefix=False)
    call_command("migrate", verbosity=0)
    from queues.apikeys import create_key
    from queues.models import Queue
    from taskforge.asgi import application

    Queue.objects.create(name=QUEUE)
    _, key = create_key("bench-phases", "producer")
    return application, key


def main(argv: list[str]) -> int:
    import uvloop  # what gunicorn's uvicorn worker runs

    http = "--http" in argv
    argv = [arg for arg in argv if arg != "--http"]
    requests = int(argv[0]) if argv else DEFAULT_REQUESTS
    server_database_url = os.environ.get("DATABASE_URL", "")
    server_redis_url = os.environ.get("REDIS_URL", "")
    if not server_database_url or not server_redis_url:
        print("bench.phases: DATABASE_URL and REDIS_URL name the Postgres server and Redis to use", file=sys.stderr)
        return 2
    name = _prepare(server_database_url, server_redis_url)
    try:
        application, key = _application_and_key()
        with open(os.devnull, "w") as devnull:
            figures = uvloop.run(_quietly(devnull, measure(application, key, requests)))
        print(f"CPU of one single enqueue inside an API process, {requests:,} enqueues in a row:\n")
        print(table(figures))
        if http:
            with one_worker() as (url, worker):
                served = over_http(url, worker, key, requests)
            print(f"\nThe same over HTTP to one gunicorn worker, {requests:,} enqueues in a row (its CPU, /proc):\n")
            print(http_table(served, figures))
    finally:
        _drop(name, server_database_url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
