"""What runs beside a measured Postgres step: a writer, a reader and a lock watcher.

``alongside`` runs them for a block's duration and reports the longest any
write or read waited, and the ACCESS EXCLUSIVE locks on ``tf_task_event``'s
tables seen in ``pg_locks`` (sampled every few milliseconds) with how long each
was held; ``quiet_baseline`` gives the same latencies with nothing measured;
``statement_timings`` records every statement Django's connection runs.
Used by ``bench/partitions.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg


class Probe(threading.Thread):
    """Runs one statement in a loop on its own connection, timing each run."""

    def __init__(self, dsn: str, statement: str, params: Callable[[], tuple[Any, ...]] = tuple) -> None:
        super().__init__(daemon=True)
        self.dsn, self.statement, self.params = dsn, statement, params
        self.stop = threading.Event()
        self.timings: list[float] = []
        self.failures: list[str] = []

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                started = time.perf_counter()
                try:
                    conn.execute(self.statement, self.params())
                except psycopg.Error as exc:
                    self.failures.append(str(exc).splitlines()[0])
                self.timings.append(time.perf_counter() - started)
                time.sleep(0.001)

    def figures(self) -> dict[str, Any]:
        ordered = sorted(self.timings) or [0.0]
        return {
            "runs": len(self.timings),
            "failures": len(self.failures),
            "first_failure": self.failures[0] if self.failures else None,
            "p50_ms": round(ordered[len(ordered) // 2] * 1000, 2),
            "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 2),
            "max_ms": round(ordered[-1] * 1000, 2),
        }


class LockWatch(threading.Thread):
    """Samples pg_locks on tf_task_event's tables: ACCESS EXCLUSIVE locks held, and locks waited for.

    A span runs from the first to the last sample that showed it, so one
    shorter than the sampling interval (a few ms) shows as 0 or not at all.
    """

    SAMPLE = """
        SELECT c.relname, l.pid, l.mode, l.granted FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
        WHERE c.relname LIKE 'tf\\_task\\_event%%' AND c.relkind IN ('r', 'p')
          AND (NOT l.granted OR l.mode = 'AccessExclusiveLock') AND l.pid <> pg_backend_pid()
    """

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.stop = threading.Event()
        self.open: dict[tuple[str, int, str, bool], tuple[float, float]] = {}
        self.spans: list[tuple[str, str, bool, float]] = []
        self.samples = 0

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                now = time.perf_counter()
                seen = set(conn.execute(self.SAMPLE).fetchall())
                self.samples += 1
                for key in seen:
                    first, _ = self.open.get(key, (now, now))
                    self.open[key] = (first, now)
                for key in set(self.open) - seen:
                    self._close(key)
                time.sleep(0.002)
        for key in list(self.open):
            self._close(key)

    def _close(self, key: tuple[str, int, str, bool]) -> None:
        first, last = self.open.pop(key)
        name, _, mode, granted = key
        self.spans.append((name, mode, granted, last - first))

    def figures(self) -> dict[str, Any]:
        held: dict[str, float] = {}
        waited: dict[str, float] = {}
        for name, mode, granted, span in self.spans:
            if granted:
                held[name] = max(held.get(name, 0.0), span)
            else:
                key = f"{name} ({mode})"
                waited[key] = max(waited.get(key, 0.0), span)
        return {
            "samples": self.samples,
            "access_exclusive_held_ms": {name: round(span * 1000, 1) for name, span in sorted(held.items())},
            "lock_waits_ms": {name: round(span * 1000, 1) for name, span in sorted(waited.items())},
        }


@contextmanager
def alongside(dsn: str, reader_task: uuid.UUID) -> Iterator[dict[str, Any]]:
    """A writer of events, a reader of one task's history and a lock watcher, for the block's duration."""
    writer = Probe(
        dsn,
        "INSERT INTO tf_task_event (task_id, queue_id, kind, at, to_status)"
        " VALUES (gen_random_uuid(), gen_random_uuid(), 'transition', now(), 'pending')",
    )
    reader = Probe(dsn, "SELECT * FROM tf_task_event WHERE task_id = %s ORDER BY at", lambda: (reader_task,))
    watch = LockWatch(dsn)
    report: dict[str, Any] = {}
    for thread in (writer, reader, watch):
        thread.start()
    time.sleep(0.5)
    started = time.perf_counter()
    try:
        yield report
    finally:
        report["seconds"] = round(time.perf_counter() - started, 2)
        time.sleep(0.5)
        for thread in (writer, reader, watch):
            thread.stop.set()
            thread.join()
        report.update(writer=writer.figures(), reader=reader.figures(), locks=watch.figures())


def quiet_baseline(dsn: str, reader_task: uuid.UUID, seconds: float = 3.0) -> dict[str, Any]:
    """The same writer and reader with nothing else running: what their latencies are on this machine anyway."""
    with alongside(dsn, reader_task) as baseline:
        time.sleep(seconds)
    return {key: baseline[key] for key in ("writer", "reader")}


@contextmanager
def statement_timings(into: list[dict[str, Any]]) -> Iterator[None]:
    """Every statement Django's connection runs in the block, with its duration."""
    from django.db import connection

    def timed(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            into.append(
                {"sql": " ".join(str(sql).split())[:110], "ms": round((time.perf_counter() - started) * 1000, 1)}
            )

    with connection.execute_wrapper(timed):
        yield
