"""CALLS: API CPU per call of each single-task endpoint, and (profile mode) a profile of each.

Each endpoint is called ``calls_per_endpoint`` times over ``calls_clients``
keep-alive connections: enqueue, claim (``max_tasks`` 1, no wait: each claim
gets one of the tasks just enqueued), heartbeat and ack of every claimed task;
then, on a second set of tasks enqueued and claimed in batches outside the
measure, one nack each. The figure is the gunicorn workers' CPU time (user +
system) over the calls, divided by their number; it includes whatever else
those processes did meanwhile (their idle loops), which a run this short keeps
small.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.context import Context
from bench.profile import Profiler

QUEUE = "bench_calls"
ENDPOINTS = ("enqueue", "claim", "heartbeat", "ack", "nack")
# py-spy needs a moment to attach before the calls begin.
PROFILER_ATTACH_SECONDS = 0.5


@dataclass(frozen=True)
class Lease:
    worker_id: str
    task_id: str
    lease_token: str

    def body(self, **extra: Any) -> dict[str, Any]:
        return {"worker_id": self.worker_id, "task_id": self.task_id, "lease_token": self.lease_token, **extra}


def split(items: list[Any], parts: int) -> list[list[Any]]:
    """``items`` dealt round-robin into ``parts`` lists (one per connection), none of them empty."""
    parts = max(1, min(parts, len(items)))
    return [items[n::parts] for n in range(parts)]


async def _send(ctx: Context, role: str, path: str, bodies: list[Any], clients: int, expect: int) -> list[Any]:
    """POST every body, ``clients`` connections at a time; the decoded answers, in no particular order."""
    answers: list[Any] = []

    async def client(share: list[Any]) -> None:
        conn = ctx.connection(role)
        try:
            for body in share:
                answers.append(await conn.json("POST", path, body, expect=(expect,)))
        finally:
            conn.close()

    await asyncio.gather(*(client(share) for share in split(bodies, clients)))
    return answers


class Exercise:
    """The five endpoints, one step each; ``step`` wraps each in a measure (CPU, or a profile)."""

    def __init__(self, ctx: Context, calls: int) -> None:
        self.ctx = ctx
        self.calls = calls
        self.clients = ctx.cfg.calls_clients
        self.leases: list[Lease] = []

    def send(self, role: str, path: str, bodies: list[Any], expect: int = 200) -> list[Any]:
        return asyncio.run(_send(self.ctx, role, path, bodies, self.clients, expect))

    def enqueue(self) -> int:
        self.send("producer", f"/queues/{QUEUE}/tasks", [{"payload": {"n": n}} for n in range(self.calls)], 201)
        return self.calls

    def claim(self) -> int:
        bodies = [
            {"worker_id": f"calls-{n % self.clients}", "queue": QUEUE, "max_tasks": 1, "wait_seconds": 0}
            for n in range(self.calls)
        ]
        self.leases = self._leases(self.send("worker", "/workers/claim", bodies))
        if len(self.leases) != self.calls:
            raise RuntimeError(f"CALLS: {self.calls} claims of one task got {len(self.leases)} tasks")
        return self.calls

    def heartbeat(self) -> int:
        self.send("worker", "/workers/heartbeat", [lease.body() for lease in self.leases])
        return len(self.leases)

    def ack(self) -> int:
        self.send("worker", "/workers/ack", [lease.body(result=None) for lease in self.leases])
        return len(self.leases)

    def prepare_nack(self) -> None:
        """Tasks to nack, enqueued and claimed in batches (not measured)."""
        self.ctx.preload(QUEUE, self.calls)
        leases: list[Lease] = []
        while len(leases) < self.calls:
            body = {"worker_id": "calls-nack", "queue": QUEUE, "max_tasks": 100, "wait_seconds": 1}
            got = self._leases(self.send("worker", "/workers/claim", [body]))
            if not got:
                raise RuntimeError(f"CALLS: only {len(leases)} of {self.calls} tasks to nack could be claimed")
            leases.extend(got)
        self.leases = leases

    def nack(self) -> int:
        bodies = [lease.body(error="bench", retry=True) for lease in self.leases]
        self.send("worker", "/workers/nack", bodies)
        return len(self.leases)

    def run(self, step: Callable[[str, Callable[[], int]], None]) -> None:
        self.ctx.stack.reset_state()
        for endpoint in ENDPOINTS:
            if endpoint == "nack":
                self.prepare_nack()
            step(endpoint, getattr(self, endpoint))

    @staticmethod
    def _leases(answers: list[Any]) -> list[Lease]:
        return [
            Lease(task["claimed_by"], task["id"], task["lease_token"]) for answer in answers for task in answer["tasks"]
        ]


def figure_name(endpoint: str) -> str:
    return f"API CPU per call: {endpoint}" + (" (max_tasks=1)" if endpoint == "claim" else "")


def calls(ctx: Context, run: int) -> None:
    seconds: dict[str, float] = ctx.extra.setdefault("calls_seconds", {})

    def measure(endpoint: str, step: Callable[[], int]) -> None:
        cpu = ctx.stack.api_cpu_seconds()
        began = time.perf_counter()
        made = step()
        seconds[endpoint] = time.perf_counter() - began
        cpu = ctx.stack.api_cpu_seconds() - cpu
        ctx.figures.add("CALLS", figure_name(endpoint), cpu * 1000 / made)
        ctx.figures.add("CALLS", f"{endpoint} calls/s ({ctx.cfg.calls_clients} connections)", made / seconds[endpoint])

    Exercise(ctx, ctx.cfg.calls_per_endpoint).run(measure)


def profile_each(ctx: Context) -> dict[str, Any]:
    """An unscored run with py-spy on the API workers during each endpoint's calls."""
    print("== CALLS profiling run (py-spy on the API workers, one profile per endpoint, not scored)", flush=True)
    seconds: dict[str, float] = ctx.extra.get("calls_seconds", {})
    profiles: dict[str, Any] = {}

    def profile(endpoint: str, step: Callable[[], int]) -> None:
        # Sampling runs a little past the calls: only threads holding the GIL are sampled,
        # so the idle tail adds next to nothing.
        profiler = Profiler(ctx, f"CALLS-{endpoint}", 1.0 + 1.5 * seconds.get(endpoint, 5.0))
        profiler.start()
        time.sleep(PROFILER_ATTACH_SECONDS)
        step()
        profiles[f"CALLS {endpoint}"] = profiler.finish()

    ctx.figures.recording = False
    try:
        Exercise(ctx, ctx.cfg.calls_per_endpoint).run(profile)
    finally:
        ctx.figures.recording = True
    return profiles


def define(ctx: Context) -> None:
    f = ctx.figures
    for endpoint in ENDPOINTS:
        target = ("<=", 0.4) if endpoint == "enqueue" else None
        f.define("CALLS", figure_name(endpoint), "ms", target, note="gunicorn workers' CPU / calls")
        f.define("CALLS", f"{endpoint} calls/s ({ctx.cfg.calls_clients} connections)", "calls/s")


def setup(ctx: Context) -> None:
    ctx.extra["queue_ids"][QUEUE] = ctx.create_queue(QUEUE)
