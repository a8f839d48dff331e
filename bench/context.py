"""What every workload needs: the stack, HTTP connections, workers, and Postgres checks."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.config import Config
from bench.figures import Figures
from bench.procs import ROOT, Child, Supervisor
from bench.stack import Stack
from bench.wire import Connection

BENCH_PYTHON = sys.executable


def reference_worker_available() -> bool:
    return (ROOT / "workers" / "__main__.py").exists() and (ROOT / "workers" / "client.py").exists()


@dataclass
class Context:
    cfg: Config
    stack: Stack
    supervisor: Supervisor
    log_dir: Path
    figures: Figures = field(default_factory=Figures)
    notes: dict[str, list[str]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    worker_kind: str = "reference"
    # Set for the extra, unscored profiling run: started when the measured part begins.
    profiler: Any = None

    def note(self, workload: str, text: str) -> None:
        self.notes.setdefault(workload, []).append(text)
        print(f"    note: {text}", flush=True)

    def begin_measure(self) -> None:
        if self.profiler is not None:
            self.profiler.start()

    def connection(self, role: str) -> Connection:
        return Connection(self.stack.api_url, self.stack.keys[role])

    # --- queues and tasks ---------------------------------------------------------------

    def create_queue(self, name: str, **settings: Any) -> uuid.UUID:
        async def create() -> None:
            conn = self.connection("admin")
            try:
                await conn.json("POST", "/queues", {"name": name, **settings}, expect=(201,))
            finally:
                conn.close()

        asyncio.run(create())
        with self.stack.connect() as pg:
            (queue_id,) = pg.execute("SELECT id FROM tf_queue WHERE name = %s", [name]).fetchone()
        return queue_id

    def preload(
        self,
        queue: str,
        count: int,
        *,
        batch: int = 1000,
        payload: dict[str, Any] | None = None,
        kind: str | None = None,
    ) -> list[str]:
        """Enqueue ``count`` tasks (of ``kind``, if given) through the batch API (2 connections); return their ids."""
        item: dict[str, Any] = {"payload": payload or {"bench": True}}
        if kind is not None:
            item["kind"] = kind

        async def run() -> list[str]:
            sizes = [min(batch, count - start) for start in range(0, count, batch)]
            ids: list[str] = []
            pending = list(enumerate(sizes))

            async def client() -> None:
                conn = self.connection("producer")
                try:
                    while pending:
                        _, size = pending.pop(0)
                        body = {"tasks": [item] * size}
                        created = await conn.json("POST", f"/queues/{queue}/tasks/batch", body, expect=(201,))
                        ids.extend(task["id"] for task in created["tasks"])
                finally:
                    conn.close()

            await asyncio.gather(client(), client())
            return ids

        return asyncio.run(run())

    # --- workers ---------------------------------------------------------------------------

    def start_workers(
        self,
        queue: str,
        *,
        kind: str | None = None,
        processes: int | None = None,
        concurrency: int | None = None,
        max_tasks: int | None = None,
        wait: int = 5,
        stamp: bool = False,
        label: str = "w",
    ) -> list[Child]:
        kind = kind or self.worker_kind
        processes = processes or self.cfg.worker_processes
        concurrency = concurrency or self.cfg.worker_concurrency
        max_tasks = max_tasks or self.cfg.worker_max_tasks
        env = self.stack.env(
            TASKFORGE_API_URL=self.stack.api_url,
            TASKFORGE_API_KEY=self.stack.keys["worker"],
            QUEUE=queue,
        )
        children = []
        for n in range(processes):
            worker_id = f"{label}-{kind}-{n}"
            if kind == "reference":
                argv = [
                    self.stack.python, "-m", "workers",
                    "--handler", "bench.handlers:stamp" if stamp else "bench.handlers:noop",
                    # 50 handler threads, each holding up to --prefetch tasks: claims of up to 100 (the limit).
                    "--queue", queue, "--concurrency", str(max_tasks), "--worker-id", worker_id,
                    "--wait-seconds", str(wait),
                    # Celery runs at --loglevel WARNING too: no line per task for either.
                    "--log-level", "WARNING",
                ]  # fmt: skip
                argv += self.extra.get("reference_worker_args", [])
            elif kind == "tasks":
                # The reference worker on an @app.task module, with W3's flags: tasks run by kind.
                argv = [
                    self.stack.python, "-m", "taskforge_client.worker", "bench.app_tasks",
                    "--queue", queue, "--concurrency", str(max_tasks), "--worker-id", worker_id,
                    "--wait-seconds", str(wait), "--log-level", "WARNING",
                ]  # fmt: skip
                argv += self.extra.get("reference_worker_args", [])
            elif kind == "harness":
                argv = [
                    BENCH_PYTHON, "-m", "bench.batch_worker", "--queue", queue, "--worker-id", worker_id,
                    "--concurrency", str(concurrency), "--max-tasks", str(max_tasks), "--wait", str(wait),
                ]  # fmt: skip
                if stamp:
                    argv.append("--stamp")
            elif kind == "naive":
                argv = [
                    self.stack.python, "-m", "bench.naive_worker", "--queue", queue, "--worker-id", worker_id,
                    "--threads", str(concurrency),
                ]  # fmt: skip
            else:
                raise ValueError(kind)
            children.append(self.supervisor.spawn(f"{label}-{kind}-{n}", argv, env))
        return children

    def stop_workers(self, children: list[Child]) -> None:
        for child in children:
            if not child.alive():
                raise RuntimeError(f"worker {child.name} died:\n{child.tail()}")
        for child in children:
            self.supervisor.stop(child, grace=10)

    # --- Postgres: the source of truth for every figure -----------------------------------------

    def wait_drained(self, queue_id: uuid.UUID, workers: list[Child], timeout: float) -> None:
        """Poll until the queue holds no unfinished task.

        Each poll looks for one unfinished task, not all of them: a count read
        the whole backlog's index entries every 50 ms (1.8 ms of Postgres CPU
        per poll during W3N, taken from the drain it measures); the count is
        only for the timeout's message.
        """
        deadline = time.monotonic() + timeout
        unfinished = "FROM tf_task WHERE queue_id = %s AND status IN ('pending', 'claimed', 'executing', 'retry')"
        with self.stack.connect() as pg:
            while True:
                if pg.execute(f"SELECT 1 {unfinished} LIMIT 1", [queue_id]).fetchone() is None:
                    return
                for child in workers:
                    if not child.alive():
                        raise RuntimeError(f"worker {child.name} died:\n{child.tail()}")
                self.stack.check_alive()
                if time.monotonic() > deadline:
                    (left,) = pg.execute(f"SELECT count(*) {unfinished}", [queue_id]).fetchone()
                    raise RuntimeError(f"{left} tasks still unfinished after {timeout:.0f}s")
                time.sleep(0.05)

    def outcome(self, ids: list[str]) -> dict[str, Any]:
        """Exactly-once check and timing of a set of tasks, from tf_task and tf_task_event."""
        with self.stack.connect() as pg:
            row = pg.execute(
                """
                WITH i AS (SELECT unnest(%s::uuid[]) AS id),
                per_task AS (
                    SELECT i.id, t.status,
                           (SELECT count(*) FROM tf_task_event e
                             WHERE e.task_id = i.id AND e.to_status = 'done') AS done_events,
                           (SELECT count(*) FROM tf_task_event e
                             WHERE e.task_id = i.id AND e.to_status = 'claimed') AS claims,
                           (SELECT min(e.at) FROM tf_task_event e
                             WHERE e.task_id = i.id AND e.to_status = 'claimed') AS first_claim,
                           (SELECT max(e.at) FROM tf_task_event e
                             WHERE e.task_id = i.id AND e.to_status = 'done') AS done_at,
                           t.created_at
                    FROM i LEFT JOIN tf_task t ON t.id = i.id
                )
                SELECT count(*) AS tasks,
                       count(*) FILTER (WHERE status = 'done') AS done,
                       count(*) FILTER (WHERE done_events = 1) AS done_exactly_once,
                       count(*) FILTER (WHERE done_events > 1) AS done_more_than_once,
                       count(*) FILTER (WHERE claims > 1) AS claimed_more_than_once,
                       extract(epoch FROM min(first_claim)) AS first_claim,
                       extract(epoch FROM max(done_at)) AS last_done,
                       extract(epoch FROM min(created_at)) AS first_created
                FROM per_task
                """,
                [ids],
            ).fetchone()
        names = ("tasks", "done", "done_exactly_once", "done_more_than_once", "claimed_more_than_once",
                 "first_claim", "last_done", "first_created")  # fmt: skip
        result = dict(zip(names, row, strict=True))
        for key in ("first_claim", "last_done", "first_created"):
            result[key] = None if result[key] is None else float(result[key])
        return result

    def check_exactly_once(self, workload: str, ids: list[str]) -> dict[str, Any]:
        result = self.outcome(ids)
        if not (result["tasks"] == result["done"] == result["done_exactly_once"] == len(ids)):
            raise RuntimeError(f"{workload}: not every task was done exactly once: {result}")
        if result["claimed_more_than_once"]:
            self.note(workload, f"{result['claimed_more_than_once']} task(s) were claimed more than once")
        return result
