"""A naive worker: one task per claim, one ack per task, a plain httpx loop.

``python -m bench.naive_worker --queue Q --worker-id ID [--threads 4]``, with
``TASKFORGE_API_URL`` and ``TASKFORGE_API_KEY`` set. It is what a first
integration usually looks like, and shows what batching buys.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading

import httpx

stopping = threading.Event()


def run(queue: str, worker_id: str) -> None:
    headers = {"Authorization": f"Bearer {os.environ['TASKFORGE_API_KEY']}"}
    with httpx.Client(base_url=os.environ["TASKFORGE_API_URL"], headers=headers, timeout=30) as client:
        while not stopping.is_set():
            claimed = client.post(
                "/workers/claim", json={"worker_id": worker_id, "queue": queue, "max_tasks": 1, "wait_seconds": 1}
            )
            claimed.raise_for_status()
            for task in claimed.json()["tasks"]:
                client.post(
                    "/workers/ack",
                    json={"worker_id": worker_id, "task_id": task["id"], "lease_token": task["lease_token"]},
                ).raise_for_status()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    threads = [
        threading.Thread(target=run, args=(args.queue, f"{args.worker_id}-{n}"), daemon=True)
        for n in range(args.threads)
    ]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads) and not stopping.is_set():
        stopping.wait(0.2)
