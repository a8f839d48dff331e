"""Load through a Redis failover: a producer and workers call a live API while a primary is killed.

The failover tests of each engine (``sentinel``, ``redis_cluster``) run
:func:`load_through` with their own kill, then check what the load saw and
what Postgres holds with :meth:`Load.assert_nothing_lost`.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.db.models import Count

from queues.models import Task, TaskEvent


@dataclass
class Load:
    """What the producer and the workers saw: tasks accepted, tasks acked, calls that failed."""

    queue: str
    accepted: list[str] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    accepted_before_the_kill: int = 0

    def assert_nothing_lost(self, output: Callable[[], str]) -> None:
        """Every accepted task done exactly once, in the answers and in Postgres' history; no call failed."""
        assert self.accepted_before_the_kill > 0 and len(self.accepted) > self.accepted_before_the_kill, (
            self.accepted_before_the_kill,
            len(self.accepted),
        )
        missing = set(self.accepted) - set(self.acked)
        assert not missing, f"{len(missing)} accepted tasks never done\n{output()}"
        assert [tid for tid, n in Counter(self.acked).items() if n > 1] == [], "a task was acked twice"
        assert Task.objects.filter(queue__name=self.queue).count() == len(set(self.accepted))
        assert Task.objects.filter(queue__name=self.queue).exclude(status="done").count() == 0
        done_moves = TaskEvent.objects.filter(task_id__in=self.accepted, to_status="done").values("task_id")
        moves = {str(row["task_id"]): row["n"] for row in done_moves.annotate(n=Count("id"))}
        assert moves == dict.fromkeys(set(self.accepted), 1), "a task did not move into done exactly once"
        assert self.failures == []


def load_through(url: str, headers: dict[str, str], queue: str, kill: Callable[[], Any], workers: int = 2) -> Load:
    """Produce into ``queue`` and claim and batch-ack from it; ``kill()`` after 2 s; wait for the drain.

    The producer retries an unanswered enqueue with the same idempotency key,
    as a client should; workers long-poll for up to 10 tasks at a time.
    """
    load = Load(queue)
    producing, working = threading.Event(), threading.Event()
    producing.set()
    working.set()

    def produce() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=15) as client:
            for n in itertools.count():
                if not producing.is_set():
                    return
                for _ in range(5):
                    try:
                        response = client.post(
                            f"/queues/{queue}/tasks", json={"payload": {"n": n}, "idempotency_key": f"k{n}"}
                        )
                    except httpx.HTTPError:
                        continue
                    if response.status_code in (200, 201):
                        load.accepted.append(response.json()["id"])
                        break
                    load.failures.append(f"enqueue {n}: {response.status_code} {response.text[:200]}")
                time.sleep(0.02)

    def work(worker_id: str) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=15) as client:
            while working.is_set():
                body = {"worker_id": worker_id, "queue": queue, "max_tasks": 10, "wait_seconds": 1}
                try:
                    response = client.post("/workers/claim", json=body)
                    if response.status_code != 200:
                        load.failures.append(f"claim: {response.status_code} {response.text[:200]}")
                        continue
                    items = [{"task_id": t["id"], "lease_token": t["lease_token"]} for t in response.json()["tasks"]]
                    if items:
                        results = client.post("/workers/ack/batch", json={"worker_id": worker_id, "items": items})
                        load.acked.extend(r["task_id"] for r in results.json()["results"] if r.get("status") == "done")
                except httpx.HTTPError as exc:
                    load.failures.append(f"worker: {exc!r}")

    workers_threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(workers)]
    threads = [threading.Thread(target=produce), *workers_threads]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2)
        load.accepted_before_the_kill = len(load.accepted)
        kill()
        time.sleep(2)  # keep producing and claiming against the promoted primary
        producing.clear()
        threads[0].join(30)
        deadline = time.monotonic() + 60
        while set(load.acked) != set(load.accepted) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        producing.clear()
        working.clear()
        for thread in threads:
            thread.join(30)
    return load
