"""The harness's own batching worker: claim up to N, run the handler, ack the batch.

``python -m bench.batch_worker --queue Q --worker-id ID [--concurrency C]
[--max-tasks 50] [--wait 5] [--stamp]``, with ``TASKFORGE_API_URL`` and
``TASKFORGE_API_KEY`` in the environment. It speaks only the HTTP contract
(``/workers/claim``, ``/workers/ack/batch``); it is what a lean production
worker does, and the yardstick for the reference worker in ``workers/``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time

from bench.wire import Connection


async def _loop(args: argparse.Namespace, worker_id: str, stopping: asyncio.Event) -> None:
    conn = Connection(os.environ["TASKFORGE_API_URL"], os.environ["TASKFORGE_API_KEY"])
    claim = {"worker_id": worker_id, "queue": args.queue, "max_tasks": args.max_tasks, "wait_seconds": args.wait}
    while not stopping.is_set():
        tasks = (await conn.json("POST", "/workers/claim", claim))["tasks"]
        if not tasks:
            continue
        items = []
        for task in tasks:
            item = {"task_id": task["id"], "lease_token": task["lease_token"]}
            if args.stamp:
                item["result"] = {"started": time.time()}
            items.append(item)
        if args.single_ack:
            for item in items:
                await conn.json("POST", "/workers/ack", {"worker_id": worker_id, **item})
        else:
            await conn.json("POST", "/workers/ack/batch", {"worker_id": worker_id, "items": items})
    conn.close()


async def main(args: argparse.Namespace) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    loops = [asyncio.create_task(_loop(args, f"{args.worker_id}-{n}", stopping)) for n in range(args.concurrency)]
    await stopping.wait()
    # A long poll in flight returns within --wait seconds; do not hold the shutdown for it.
    await asyncio.wait(loops, timeout=1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--max-tasks", type=int, default=50)
    parser.add_argument("--wait", type=int, default=5)
    parser.add_argument("--stamp", action="store_true", help="ack with result {'started': time}")
    parser.add_argument("--single-ack", action="store_true", help="one /workers/ack per task")
    try:
        import uvloop

        uvloop.run(main(parser.parse_args()))
    except ImportError:
        asyncio.run(main(parser.parse_args()))
