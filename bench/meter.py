"""What one stretch of work cost: CPU of every process, Postgres' WAL and commits, Redis' commands.

A :class:`Meter` reads its counters when it starts and when it stops:

* **CPU** (user + system, from ``/proc/<pid>/stat``) of each group of processes:
  the gunicorn workers, the Postgres backends serving the bench database
  (``pg_stat_activity.datname``, autovacuum workers included, the harness's own
  connections left out by their ``application_name``), Postgres' WAL writer,
  checkpointer and background writer (server-wide: other databases on the same
  server add to them), the dedicated Redis server when the harness started one,
  each loop, the processes it is given (workers), and the harness itself (the
  load generator). A sampling thread reads them every half second too, so a
  process that exits in the middle still counts up to its last reading.
* **WAL**: the flush position's advance (server-wide), and, with
  ``pg_walinspect``, the records of the bench database's own transactions:
  those that touch one of its relations, and every record (the commit among
  them) of a transaction that does. Their commit records are the commits that
  waited for a WAL flush. A temporary replication slot holds the window's WAL
  until it is read, since other databases' writes can bring a checkpoint that
  recycles it.
* **Redis commands** from ``INFO commandstats``, counted only on a server the
  harness started for itself: on a shared server other clients' commands would
  be counted too. Commands a script runs are counted as well as the script.
* **The machine**: busy CPU time of all cores (``/proc/stat``), so that the
  share other processes took is known.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.stack import HARNESS_APPLICATION, Stack, cpu_seconds, descendants

SAMPLE_SECONDS = 0.5
POSTGRES_BACKGROUND = ("walwriter", "checkpointer", "background writer")
# The meter's own calls, never counted as the workload's.
OWN_REDIS_COMMANDS = frozenset({"info", "config|resetstat"})
SCRIPT_COMMANDS = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"})

# The bench database's share of the WAL between two positions: records that touch one
# of its relations ("rel <tablespace>/<database>/<relation>" in block_ref), and every
# record of a transaction that wrote any, its commit record included.
DATABASE_WAL = """
WITH records AS (
    SELECT xid, record_length, fpi_length, resource_manager, record_type,
           coalesce(block_ref, '') ~ %(touches)s AS touches
    FROM pg_get_wal_records_info(%(start)s, %(end)s)
), ours AS (
    SELECT DISTINCT xid FROM records WHERE touches AND xid::text <> '0'
)
SELECT coalesce(sum(record_length), 0), coalesce(sum(fpi_length), 0),
       count(*) FILTER (WHERE resource_manager = 'Transaction' AND record_type LIKE 'COMMIT%%')
FROM records
WHERE touches OR xid IN (SELECT xid FROM ours)
"""


def busy_seconds(proc_stat: str) -> float:
    """Busy CPU time of all cores from ``/proc/stat``: everything but idle and iowait."""
    values = [int(v) for v in proc_stat.splitlines()[0].split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user and nice]
    busy = sum(values[:8]) - values[3] - values[4]
    return busy / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    return busy_seconds(Path("/proc/stat").read_text())


def command_counts(commandstats: dict[str, Any]) -> dict[str, int]:
    """``INFO commandstats`` as redis-py parses it -> calls by command name."""
    counts = {}
    for key, stats in commandstats.items():
        name = key.removeprefix("cmdstat_")
        calls = stats.get("calls", 0) if isinstance(stats, dict) else 0
        counts[name] = int(calls)
    return counts


def command_difference(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Calls made between two readings, the meter's own left out, busiest first."""
    moved = {name: after[name] - before.get(name, 0) for name in after if name not in OWN_REDIS_COMMANDS}
    return dict(sorted(((n, c) for n, c in moved.items() if c > 0), key=lambda item: (-item[1], item[0])))


class ProcessCpu:
    """CPU time used by a changing set of processes since the first reading.

    A process already there at the first reading counts from it; one that
    appears later counts from its start (its whole life is inside the window);
    one that disappears counts up to its last reading.
    """

    def __init__(self, read: Callable[[int], float] = cpu_seconds) -> None:
        self._read = read
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._started = False

    def sample(self, pids: Iterable[int]) -> None:
        for pid in pids:
            value = self._read(pid)
            if value <= 0.0 and pid in self._last:
                continue  # gone between the listing and the read: keep its last reading
            if pid not in self._first:
                self._first[pid] = value if not self._started else 0.0
            self._last[pid] = max(value, self._last.get(pid, 0.0))
        self._started = True

    @property
    def seconds(self) -> float:
        return sum(self._last[pid] - self._first[pid] for pid in self._last)


@dataclass
class DatabaseWal:
    """The bench database's WAL records between the meter's start and stop."""

    bytes: int
    full_page_bytes: int
    commits: int


@dataclass
class Reading:
    """What the work between a meter's start and stop cost."""

    seconds: float
    cpu: dict[str, float]  # CPU seconds by group: see Meter.groups
    machine_busy: float  # CPU seconds of all cores, every process on the machine
    wal_bytes: int  # server-wide
    database_wal: DatabaseWal | None
    redis_commands: dict[str, int] | None  # None: the Redis server is shared
    notes: list[str] = field(default_factory=list)

    @property
    def ours(self) -> float:
        """CPU seconds of the processes a task needs: every group but the server-wide Postgres ones."""
        return sum(seconds for group, seconds in self.cpu.items() if group != "postgres background")

    @property
    def others(self) -> float:
        """CPU seconds the rest of the machine took meanwhile (never below zero)."""
        return max(0.0, self.machine_busy - self.ours)

    def beyond(self, idle: Reading) -> Reading:
        """This reading less what the same processes spent in ``idle``, scaled to as long (CPU and
        Redis commands, never below zero): what the work itself cost."""
        scale = self.seconds / idle.seconds
        cpu = {group: max(0.0, used - idle.cpu.get(group, 0.0) * scale) for group, used in self.cpu.items()}
        commands = self.redis_commands
        if commands is not None:
            quiet = idle.redis_commands or {}
            moved = {name: round(calls - quiet.get(name, 0) * scale) for name, calls in commands.items()}
            commands = dict(sorted(((n, c) for n, c in moved.items() if c > 0), key=lambda item: (-item[1], item[0])))
        return dataclasses.replace(self, cpu=cpu, redis_commands=commands)

    def redis_calls(self) -> int | None:
        return None if self.redis_commands is None else sum(self.redis_commands.values())

    def redis_scripts(self) -> int | None:
        if self.redis_commands is None:
            return None
        return sum(calls for name, calls in self.redis_commands.items() if name in SCRIPT_COMMANDS)


class Meter:
    """Start, do the work, stop: a :class:`Reading` of everything it cost."""

    def __init__(self, stack: Stack, processes: dict[str, list[int]] | None = None) -> None:
        """``processes``: more groups to count, by name, each a list of root pids (with their children)."""
        self.stack = stack
        self.processes = dict(processes or {})
        self._groups: dict[str, ProcessCpu] = {}
        self._pg: psycopg.Connection | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._database_oid = 0
        self._walinspect = False

    # --- the groups ---------------------------------------------------------------------

    def _pids(self) -> dict[str, list[int]]:
        assert self._pg is not None
        rows = self._pg.execute(
            "SELECT pid, datname IS NOT NULL FROM pg_stat_activity "
            "WHERE (datname = current_database() AND coalesce(application_name, '') <> %s) "
            "OR backend_type = ANY(%s)",
            [HARNESS_APPLICATION, list(POSTGRES_BACKGROUND)],
        ).fetchall()
        pids = {
            "api": self.stack.api_worker_pids() if self.stack.api is not None else [],
            "postgres": [pid for pid, ours in rows if ours],
            "postgres background": [pid for pid, ours in rows if not ours],
            "load generator": [os.getpid()],
        }
        for group, roots in self.processes.items():
            pids[group] = [pid for root in roots for pid in descendants(root)]
        if self.stack.redis_server is not None:
            pids["redis"] = [self.stack.redis_server.pid]
        for loop in self.stack.loops:
            pids[loop.name] = descendants(loop.pid)
        return pids

    def _sample(self) -> None:
        with self._lock:
            for group, pids in self._pids().items():
                self._groups.setdefault(group, ProcessCpu()).sample(pids)

    def _sampling(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            try:
                self._sample()
            except psycopg.Error:
                return  # the final reading in stop() still happens

    # --- start and stop -------------------------------------------------------------------

    def _wal_position(self) -> str:
        assert self._pg is not None
        return str(self._pg.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0])

    def _redis_counts(self) -> dict[str, int] | None:
        if self.stack.redis_server is None:
            return None
        return command_counts(self.stack.redis().info("commandstats"))

    def start(self) -> Meter:
        self._pg = self.stack.connect()
        self._database_oid = self._pg.execute(
            "SELECT oid FROM pg_database WHERE datname = current_database()"
        ).fetchone()[0]
        self._walinspect = bool(
            self._pg.execute("SELECT count(*) FROM pg_extension WHERE extname = 'pg_walinspect'").fetchone()[0]
        )
        self._notes: list[str] = []
        if self._walinspect:
            try:  # reserved from now on, dropped with the meter's connection
                self._pg.execute(
                    "SELECT pg_create_physical_replication_slot(%s, true, true)", [f"bench_meter_{os.getpid()}"]
                )
            except psycopg.Error as exc:
                self._notes.append(f"no replication slot to hold the WAL until it is read: {exc}")
        self._redis_before = self._redis_counts()
        self._sample()
        self._machine = machine_busy_seconds()
        self._wal_start = self._wal_position()
        self._began = time.perf_counter()
        self._thread = threading.Thread(target=self._sampling, name="meter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Reading:
        assert self._pg is not None and self._thread is not None
        seconds = time.perf_counter() - self._began
        wal_end = self._wal_position()
        machine = machine_busy_seconds() - self._machine
        self._stop.set()
        self._thread.join()
        self._sample()
        redis_after = self._redis_counts()
        notes = self._notes
        wal = self._pg.execute("SELECT pg_wal_lsn_diff(%s, %s)::bigint", [wal_end, self._wal_start]).fetchone()[0]
        database_wal = None
        if self._walinspect:
            try:
                database_wal = DatabaseWal(
                    *self._pg.execute(
                        DATABASE_WAL,
                        {"start": self._wal_start, "end": wal_end, "touches": f"rel [0-9]+/{self._database_oid}/"},
                    ).fetchone()
                )
            except psycopg.Error as exc:  # WAL already recycled, or no permission: the server-wide figure stays
                notes.append(f"pg_walinspect could not read the window's WAL: {exc}")
        self._pg.close()
        commands = None
        if self._redis_before is not None and redis_after is not None:
            commands = command_difference(self._redis_before, redis_after)
        return Reading(
            seconds=seconds,
            cpu={group: tracker.seconds for group, tracker in self._groups.items()},
            machine_busy=machine,
            wal_bytes=int(wal),
            database_wal=database_wal,
            redis_commands=commands,
            notes=notes,
        )
