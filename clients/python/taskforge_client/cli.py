"""The ``taskforge`` command: one TaskForge, seen and steered from a terminal.

``taskforge queues``, ``taskforge stats QUEUE``, ``taskforge enqueue QUEUE
'{"user_id": 1}'``, ``taskforge task ID``, ``taskforge dlq QUEUE``,
``taskforge replay QUEUE --all`` (or task ids), ``taskforge pause QUEUE`` /
``resume QUEUE``, ``taskforge schedules``, ``taskforge workers``, ``taskforge
worker quiet|stop|resume WORKER_ID``. Tables for
people by default; ``--json`` prints the API's answers for scripts.

Settings: ``--url`` or ``TASKFORGE_API_URL`` (default ``http://localhost:8080``);
the API key from ``TASKFORGE_API_KEY`` or ``--api-key-file`` (never a flag of
its own: ``ps`` shows every process's arguments to every user). Most commands
need an admin key; ``stats``, ``enqueue`` and ``task`` a producer key.

Exit codes: 0 done; 1 TaskForge refused the request (an unknown queue or
task, a conflict, bad input); 2 a bad command line or setting; 3 TaskForge
could not be reached or is unavailable; 4 the API key was refused.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from taskforge_client.client import TaskForgeClient
from taskforge_client.errors import (
    ConnectionFailed,
    Forbidden,
    ServerError,
    TaskForgeError,
    Unauthorized,
    Unavailable,
)
from taskforge_client.tables import fields, table

__all__ = ["main", "script"]

PROG = "taskforge"
DEFAULT_URL = "http://localhost:8080"

OK, REFUSED, USAGE, UNREACHABLE, KEY_REFUSED = 0, 1, 2, 3, 4


class UsageError(Exception):
    """A command line that cannot be run as given (exit code 2)."""


@dataclass(frozen=True)
class Output:
    """What a command answers: ``data`` for ``--json``, ``text`` for people."""

    data: Any
    text: str


Command = Callable[[TaskForgeClient, argparse.Namespace], Output]

# What ``taskforge task`` shows above the payload, the result and the history.
TASK_FIELDS = (
    "id",
    "queue",
    "kind",
    "status",
    "priority",
    "attempts",
    "max_retries",
    "scheduled_at",
    "created_at",
    "claimed_by",
    "finished_at",
    "last_error",
)


# -- commands ------------------------------------------------------------------


def queues(client: TaskForgeClient, args: argparse.Namespace) -> Output:
    listed = []
    for queue in client.queues():
        stats = client.stats(queue["name"])
        listed.append({**queue, "depth": stats["depth"], "dlq_depth": stats["dlq_depth"]})
    rows = [
        (
            q["name"],
            q["paused"],
            q["rate_limit"],
            q["depth"]["pending"],
            q["depth"]["scheduled"],
            q["depth"]["claimed"] + q["depth"]["executing"],
            q["depth"]["retry"],
            q["dlq_depth"],
        )
        for q in listed
    ]
    columns = ("QUEUE", "PAUSED", "RATE/S", "PENDING", "SCHEDULED", "RUNNING", "RETRY", "DEAD")
    return Output(listed, table(columns, rows))


def stats(client: TaskForgeClient, args: argparse.Namespace) -> Output:
    answer = client.stats(args.queue)
    shown = {"queue": answer["queue"], "paused": answer["paused"], **answer["depth"]}
    shown |= {
        "dlq depth": answer["dlq_depth"],
        "enqueued/s": answer["enqueued_per_sec"],
        "completed/s": answer["completed_per_sec"],
        "error rate": answer["error_rate"],
        "oldest pending (s)": answer["oldest_pending_age_seconds"],
    }
    return Output(answer, fields(shown))


def enqueue(client: TaskForgeClient, args: argparse.Namespace) -> Output:
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise UsageError(f"the payload is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise UsageError("the payload must be a JSON object, e.g. '{\"user_id\": 1}'")
    if args.delay is not None and args.at is not None:
        raise UsageError("give --delay or --at, not both")
    scheduled_at: str | None = args.at
    if args.delay is not None:
        scheduled_at = (datetime.now(UTC) + timedelta(seconds=args.delay)).isoformat()
    task = client.enqueue(
        args.queue,
        payload,
        priority=args.priority,
        scheduled_at=scheduled_at,
        idempotency_key=args.idempotency_key,
        max_retries=args.max_retries,
        kind=args.kind,
        timeout_seconds=args.timeout_seconds,
    )
    return Output(task, fields({"task": task["id"], "queue": task["queue"], "status": task["status"]}))


def task(client: TaskForgeClient, args: argparse.Namespace) -> Output:
    found = client.find_task(args.task_id, wait_seconds=args.wait)
    shown = {name: found.get(name) for name in TASK_FIELDS}
    shown["payload"] = json.dumps(found["payload"], ensure_ascii=False)
    shown["result"] = None if found.get("result") is None else json.dumps(found["result"], ensure_ascii=False)
    history = table(
        ("AT", "FROM", "TO", "WORKER", "DETAIL"),
        ((h["at"], h["from_status"], h["to_status"], h["worker_id"], h["detail"]) for h in found.get("history", [])),
    )
    return Output(found, f"{fields(shown)}\n\n{history}")


def dlq(client: TaskForgeClient, args: argparse.Namespace) -> Output:
    entries = client.dead_letters(args.queue)
    rows = [(e["id"], e["died_at"], e["attempts"], e["replay_count"], e["last_error"]) for e in entries]
    return Output(entries, table(("TASK", "DIED", "ATTEMPTS", "REPLAYS", "LAST ERROR"), rows))


def replay(client: TaskForgeClient, args: argparse.Namespace) -> Output:
    if args.all == bool(args.task_ids):
        raise UsageError("name the dead tasks to replay, or give --all (not both)")
    replayed = client.replay_many(args.queue, None if args.all else args.task_ids)
    return Output({"replayed": replayed}, f"replayed {replayed} dead task{'s' * (replayed != 1)} of {args.queue}")


def pause(client: TaskForgeClient, args: argparse.Namespace) -> Output:
    queue = client.update_queue(args.queue, paused=True)
    return Output(queue, f"paused {queue['name']}: it accepts tasks and dispatches none")


def resume(client: TaskForgeClient, args: argparse.Namespace) -> Output:
    queue = client.update_queue(args.queue, paused=False)
    return Output(queue, f"resumed {queue['name']}")


def schedules(client: TaskForgeClient, args: argparse.Namespace) -> Output:
    listed = client.schedules()
    rows = [
        (
            s["name"],
            s["queue"],
            s["cron"] if s.get("cron") else f"every {s['every_seconds']} s",
            s["timezone"],
            s["paused"],
            s["next_run_at"],
            s["last_run_at"],
        )
        for s in listed
    ]
    return Output(listed, table(("SCHEDULE", "QUEUE", "WHEN", "TIMEZONE", "PAUSED", "NEXT RUN", "LAST RUN"), rows))


def workers(client: TaskForgeClient, args: argparse.Namespace) -> Output:
    listed = client.workers()
    rows = [
        (w["worker_id"], len(w["current_tasks"]), w["last_heartbeat_at"], w["last_seen_at"], w["stale"]) for w in listed
    ]
    return Output(listed, table(("WORKER", "TASKS", "LAST HEARTBEAT", "LAST SEEN", "STALE"), rows))


def worker(client: TaskForgeClient, args: argparse.Namespace) -> Output:
    told = client.control_worker(args.worker_id, args.action)
    said = {
        "quiet": "claims nothing more and finishes what it holds",
        "stop": "claims nothing more, finishes what it holds, then exits",
        "resume": "is back to work",
    }[args.action]
    return Output(told, f"worker {told['worker_id']} {said} (holds {len(told['current_tasks'])} tasks)")


# -- command line --------------------------------------------------------------


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="See and steer a TaskForge: queues, tasks, dead letters, schedules, workers.",
        epilog="The API key comes from TASKFORGE_API_KEY or --api-key-file. Exit codes: 0 done, "
        "1 refused by TaskForge, 2 bad command line, 3 TaskForge unreachable, 4 API key refused.",
    )
    parser.add_argument("--url", help=f"TaskForge base URL [TASKFORGE_API_URL, default {DEFAULT_URL}]")
    parser.add_argument("--api-key-file", type=Path, help="read the API key from this file")
    parser.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    parser.add_argument("--timeout", type=_positive_float, default=15.0, help="seconds per request (default 15)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Command, summary: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=summary, description=summary)
        sub.set_defaults(run=run)
        return sub

    command("queues", queues, "list the queues with their depth")
    command("stats", stats, "one queue's depth, rates and oldest pending age").add_argument("queue")
    sub = command("enqueue", enqueue, "add one task to a queue")
    sub.add_argument("queue")
    sub.add_argument("payload", help="the task's payload, a JSON object")
    sub.add_argument("--priority", type=int, help="1 (highest) to 10 (lowest)")
    sub.add_argument("--kind", help="what the task is, e.g. emails.send_welcome")
    sub.add_argument("--delay", type=float, help="run it no sooner than this many seconds from now")
    sub.add_argument("--at", help="run it no sooner than this ISO 8601 time (with its offset)")
    sub.add_argument("--idempotency-key", help="re-sending the same key creates nothing new")
    sub.add_argument("--max-retries", type=int, help="overrides the queue's")
    sub.add_argument("--timeout-seconds", type=int, help="time limit of one attempt")
    sub = command("task", task, "one task, whatever its queue, with its history")
    sub.add_argument("task_id")
    sub.add_argument("--wait", type=int, default=0, help="wait up to this many seconds (0-30) for it to finish")
    command("dlq", dlq, "a queue's dead-letter entries, newest first").add_argument("queue")
    sub = command("replay", replay, "put dead tasks back to pending")
    sub.add_argument("queue")
    sub.add_argument("task_ids", nargs="*", metavar="TASK_ID")
    sub.add_argument("--all", action="store_true", help="every dead task of the queue")
    command("pause", pause, "stop dispatching a queue's tasks (it still accepts new ones)").add_argument("queue")
    command("resume", resume, "dispatch a paused queue's tasks again").add_argument("queue")
    command("schedules", schedules, "list the periodic schedules with their next run")
    command("workers", workers, "list the workers seen in the last 10 minutes")
    sub = command("worker", worker, "ask one worker to quiet or stop, or take that back")
    sub.add_argument("action", choices=["quiet", "stop", "resume"])
    sub.add_argument("worker_id")
    return parser


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def _api_key(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    key_file: Path | None = args.api_key_file
    if key_file is not None:
        try:
            key = key_file.read_text().strip()
        except OSError as exc:
            raise UsageError(f"cannot read --api-key-file: {exc}") from None
    else:
        key = environ.get("TASKFORGE_API_KEY", "").strip()
    if not key:
        raise UsageError("no API key: export TASKFORGE_API_KEY (an admin key for most commands) or use --api-key-file")
    return key


def exit_code_for(error: TaskForgeError) -> int:
    """What a failed call means to a script: the key refused, TaskForge away, or the request refused."""
    if isinstance(error, Unauthorized | Forbidden):
        return KEY_REFUSED
    if isinstance(error, ConnectionFailed | Unavailable | ServerError):
        return UNREACHABLE
    return REFUSED


def main(argv: Sequence[str] | None = None, *, prog: str = PROG, environ: Mapping[str, str] | None = None) -> int:
    """Run one command (default: the command line); returns the exit code."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    args = _parser(prog).parse_args(argv)  # exits 2 itself on a bad command line
    try:
        key = _api_key(args, env)
        with TaskForgeClient(args.url or env.get("TASKFORGE_API_URL") or DEFAULT_URL, key, args.timeout) as client:
            output = args.run(client, args)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return USAGE
    except TaskForgeError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        for field, problems in exc.fields.items():
            print(f"  {field}: {'; '.join(problems)}", file=sys.stderr)
        return exit_code_for(exc)
    if args.json:
        print(json.dumps(output.data, indent=2, ensure_ascii=False))
    else:
        print(output.text)
    return OK


def script() -> int:
    """The ``taskforge`` console script."""
    return main()
