"""The doorbell's wake-up latency: a single Redis (classic pub/sub) next to a Redis Cluster (sharded pub/sub).

Not part of ``make bench``: run it with the project's interpreter, against a
Postgres database it may migrate and fill (``DATABASE_URL``)::

    DATABASE_URL=postgres://... .venv/bin/python -m bench.doorbell [--tasks 200]

For each kind of Redis it starts its own servers on free loopback ports (one
redis-server; or three primaries and three replicas, ``taskforge.dev.redis_cluster``),
one API server (gunicorn, one worker process) and no loops, so only the announce
and the doorbell can end a wait. Then, one task at a time, a worker's long poll
(``wait_seconds`` 10) waits on the queue; once it has waited 0.2 s a producer
enqueues one task, and the poll's answer ends the sample. Two figures per task:

* ``enqueue-to-claim``: from the enqueue request going out to the claim's
  answer arriving, both in this process;
* ``created-to-claimed``: Postgres' own clock, the task row's ``claimed_at``
  minus its ``created_at`` (commit, announce, bell, wake-up, claim statement).

A poll that answered later than the shorter re-check timer (1 s) would mean a
lost bell; the run reports how many did.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import httpx

from taskforge.dev import launcher
from taskforge.dev.redis_cluster import LocalCluster

SETTLE_SECONDS = 0.2
LOST_BELL_SECONDS = 1.0


@contextmanager
def single_redis(directory: Path) -> Iterator[str]:
    port = launcher.free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = launcher.spawn([*argv, "--dir", str(directory)], dict(os.environ), log=directory / "redis.log")
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise TimeoutError("redis-server did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        launcher.terminate(process, grace=5)


@contextmanager
def cluster_redis(directory: Path) -> Iterator[str]:
    cluster = LocalCluster(directory=directory)
    try:
        cluster.start()
        yield cluster.url()
    finally:
        cluster.stop()


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        launcher.manage_py(*args), cwd=launcher.ROOT, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def measure(redis_url: str, tasks: int, directory: Path) -> dict[str, list[float]]:
    env = {**os.environ, "REDIS_URL": redis_url, "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "bench")}
    manage(env, "migrate", "--no-input")
    stamp = str(int(time.time() * 1000))
    admin = manage(env, "create_api_key", f"doorbell-admin-{stamp}", "--role", "admin")
    queue = f"doorbell_{stamp}"  # a queue of this run's own
    port = launcher.free_port()
    api = launcher.api_server(host="127.0.0.1", port=port, workers=1)
    server = launcher.spawn(api.argv, api.environ(env, None), log=directory / "api.log")
    base = f"http://127.0.0.1:{port}"
    samples: dict[str, list[float]] = {"enqueue-to-claim": [], "created-to-claimed": []}
    try:
        launcher.wait_ready(base, timeout=30, process=server)
        headers = {"Authorization": f"Bearer {admin}"}
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
            assert client.post("/queues", json={"name": queue}).status_code == 201
            for n in range(tasks):
                answer: dict[str, object] = {}
                waiter = threading.Thread(target=_long_poll, args=(base, headers, queue, answer))
                waiter.start()
                time.sleep(SETTLE_SECONDS)  # past its first attempt: waiting on the doorbell
                sent = time.perf_counter()
                created = client.post(f"/queues/{queue}/tasks", json={"payload": {"n": n}})
                waiter.join(30)
                claimed = answer["tasks"]
                assert isinstance(claimed, list) and [t["id"] for t in claimed] == [created.json()["id"]], claimed
                at = answer["at"]
                assert isinstance(at, float)
                samples["enqueue-to-claim"].append((at - sent) * 1000)
                task = client.get(f"/tasks/{claimed[0]['id']}").json()
                samples["created-to-claimed"].append(_ms_between(task["created_at"], task["claimed_at"]))
                lease = {"worker_id": "bench", "task_id": claimed[0]["id"], "lease_token": claimed[0]["lease_token"]}
                client.post("/workers/ack", json=lease)
    finally:
        launcher.terminate(server, grace=10)
    return samples


def _long_poll(base: str, headers: dict[str, str], queue: str, answer: dict[str, object]) -> None:
    """One worker's long poll; ``answer`` gets the tasks and when they arrived."""
    with httpx.Client(base_url=base, headers=headers, timeout=30) as poller:
        body = {"worker_id": "bench", "queue": queue, "wait_seconds": 10}
        claimed = poller.post("/workers/claim", json=body).json()["tasks"]
        answer["at"] = time.perf_counter()
        answer["tasks"] = claimed


def _ms_between(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds() * 1000


def report(kind: str, samples: dict[str, list[float]]) -> None:
    for name, values in samples.items():
        ordered = sorted(values)
        p90 = ordered[int(0.9 * (len(ordered) - 1))]
        lost = sum(1 for v in values if v >= LOST_BELL_SECONDS * 1000)
        print(
            f"{kind:<28} {name:<20} n={len(values):<4} p50={statistics.median(values):6.2f} ms "
            f"p90={p90:6.2f} ms max={max(values):7.2f} ms  over {LOST_BELL_SECONDS:.0f} s: {lost}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200, help="samples per kind of Redis (default 200)")
    args = parser.parse_args()
    if "DATABASE_URL" not in os.environ:
        print("bench.doorbell needs DATABASE_URL (a database it may migrate and write to)", file=sys.stderr)
        return 2
    kinds = {"single Redis (PUBLISH)": single_redis, "Cluster 3+3 (SPUBLISH)": cluster_redis}
    results = {}
    for kind, servers in kinds.items():
        with tempfile.TemporaryDirectory(prefix="tf-doorbell-") as scratch, servers(Path(scratch)) as url:
            results[kind] = measure(url, args.tasks, Path(scratch))
    for kind, samples in results.items():
        report(kind, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
