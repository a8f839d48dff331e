"""The multi-node simulation: TaskForge as deployed past one machine, on this one.

``python -m faults.multinode up`` starts it and prints where everything is
(Ctrl-C stops it all); ``python -m faults.multinode load`` runs a load
through it and prints the throughput; ``python -m faults --multinode
--soak-minutes N`` runs the fault soak through it (``make test-faults-multinode``).

* Postgres: the machine's server, a dedicated database, reached only through
  PgBouncer in transaction pool mode (``TASKFORGE_DB_PGBOUNCER=true``).
* Redis (``--redis``): a Cluster of three primaries and three replicas
  (``redis+cluster://``), or a primary, a replica and three sentinels
  (``redis+sentinel://``).
* Three API servers (gunicorn, as in production) on their own ports behind
  HAProxy; producers and workers know only HAProxy's address.
* Two copies of each loop (dispatcher, scheduler, watchdog, pusher).

Its faults, beside the soak's own: a Redis primary killed (on a Cluster, the
primary of the doorbell's shard; its replica is promoted, by the cluster or by
the sentinels, and the killed node comes back as a replica) and PgBouncer
killed and restarted (every client connection cut).
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from faults.engines import ClusterRedis, HAProxy, PgBouncer, SentinelRedis
from faults.harness import Harness
from faults.load import Producer, create_queue
from faults.services import MachinePostgres
from faults.stack import LOOPS, Stack
from taskforge.dev.launcher import free_ports

#: Its own database (dropped and recreated): never the one ``make test-faults`` uses.
DATABASE_URL = "postgres://postgres@127.0.0.1:5432/taskforge_multinode"
API_SERVERS = 3
LOOP_COPIES = 2
#: Producer threads of the load run (each one enqueue at a time, over keep-alive).
LOAD_PRODUCERS = 16
#: Worker processes behind each API server's gunicorn master.
API_PROCESSES = 1


REDIS_MODES = ("cluster", "sentinel")


class MultiNodeHarness(Harness):
    """The fault harness over the multi-node topology (``faults.harness.Harness`` runs the scenarios)."""

    multinode = True

    def __init__(
        self, run_dir: Path, postgres: MachinePostgres, workers: int, rate: float, redis_mode: str = "cluster"
    ) -> None:
        super().__init__(run_dir, postgres, workers, rate)
        (run_dir / "redis").mkdir(parents=True, exist_ok=True)
        self.redis_mode = redis_mode
        nodes = run_dir / "redis"
        self.redis_nodes = ClusterRedis(nodes) if redis_mode == "cluster" else SentinelRedis(nodes)
        # What the soak's Redis faults act on: client(), flushall() and fail_over() reach the primary of the moment.
        self.redis = self.redis_nodes  # type: ignore[assignment]
        self.pgbouncer = PgBouncer(postgres.url)
        self.api_ports = free_ports(API_SERVERS)
        self.haproxy = HAProxy(self.api_ports)

    @property
    def front_url(self) -> str:
        return self.haproxy.url

    def api_urls(self) -> list[str]:
        return [self.haproxy.url]  # producers, probes and workers go through the load balancer

    def worker_api_url(self) -> str | None:
        return self.haproxy.url

    def start(self) -> None:
        self.postgres.start()
        self.redis_nodes.start()
        self.pgbouncer.start()
        self.stack = Stack(
            run_dir=self.run_dir,
            database_url=self.pgbouncer.url(),
            redis_url=self.redis_nodes.url(0),
            secret_key=secrets.token_urlsafe(50),
            settings_env={"TASKFORGE_DB_PGBOUNCER": "true"},
        )
        self.stack.prepare()
        for port in self.api_ports:
            self.stack.start_api(port=port, processes=API_PROCESSES)
        self.haproxy.start()
        for command in LOOPS:
            for _ in range(LOOP_COPIES):
                self.stack.start_loop(command)
        for _ in range(self.workers):
            self.stack.start_worker(api_url=self.haproxy.url)

    def stop(self) -> None:
        try:
            self.stack.stop_all()
        finally:
            self.haproxy.stop()
            self.pgbouncer.stop()
            self.redis_nodes.stop()
            self.postgres.stop()

    def heal(self, run: object) -> None:
        """Back to the nominal topology: PgBouncer up, three API servers, two of each loop, the workers."""
        if self.pgbouncer.process is None or self.pgbouncer.process.poll() is not None:
            self.pgbouncer.start()
        for proc in self.stack.procs:
            proc.signal(signal.SIGCONT)
        running = {int(p.url.rsplit(":", 1)[1]) for p in self.stack.apis()}
        for port in self.api_ports:
            if port not in running:
                dead = [p for p in self.stack.procs if p.kind == "api" and p.url.endswith(f":{port}")]
                self.stack.replace(dead[-1])
        for command in LOOPS:
            for _ in range(LOOP_COPIES - len(self.stack.loops(command))):
                self.stack.start_loop(command)
        self.top_up_workers()


def _fresh(args: argparse.Namespace, prefix: str) -> MultiNodeHarness:
    run_dir = Path(tempfile.mkdtemp(prefix=prefix))
    postgres = MachinePostgres(args.database_url)
    return MultiNodeHarness(run_dir, postgres, workers=args.workers, rate=args.rate, redis_mode=args.redis)


def _up(args: argparse.Namespace) -> int:
    harness = _fresh(args, "taskforge-multinode-")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        harness.start()
        print(f"API (HAProxy)   {harness.haproxy.url}")
        print(f"API servers     {', '.join(p.url for p in harness.stack.apis())}")
        print(f"Postgres        {harness.pgbouncer.url()} (PgBouncer, transaction pooling)")
        print(f"Redis           {harness.redis_nodes.url(0)}")
        print(f"keys            admin {harness.stack.admin_key}  producer {harness.stack.producer_key}")
        print(f"logs            {harness.run_dir / 'logs'}")
        print("Ctrl-C stops everything.", flush=True)
        while not stopping.is_set():
            stopping.wait(1)
    except KeyboardInterrupt:
        pass
    finally:
        harness.stop()
        shutil.rmtree(harness.run_dir, ignore_errors=True)
    return 0


def _load(args: argparse.Namespace) -> int:
    """Producers at ``--rate`` for ``--seconds`` through HAProxy; every task must end done."""
    harness = _fresh(args, "taskforge-multinode-load-")
    try:
        harness.start()
        queue = "multinode-load"
        create_queue(harness.haproxy.url, harness.stack.admin_key, queue)
        # No-op tasks, none failing: the load measures the topology, not the handler.
        producer = Producer(
            apis=harness.api_urls,
            api_key=harness.stack.producer_key,
            queue=queue,
            rate=args.rate,
            threads=LOAD_PRODUCERS,
            sleep_ms=(0, 0),
            fail_every=1 << 62,
        )
        started = time.monotonic()
        producer.start()
        time.sleep(args.seconds)
        producer.stop()
        while harness.unfinished(queue) and time.monotonic() - started < args.seconds + 60:
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        accepted = len(producer.accepted)
        left = harness.unfinished(queue)
        stats = httpx.get(
            f"{harness.haproxy.url}/queues/{queue}/stats",
            headers={"Authorization": f"Bearer {harness.stack.admin_key}"},
            timeout=10,
        ).json()
        print(f"accepted {accepted} tasks in {args.seconds:g} s through HAProxy; {left} unfinished")
        print(f"enqueue-to-done for the whole load: {accepted / elapsed:.0f} tasks/s over {elapsed:.1f} s")
        print(f"queue stats: {stats}")
        return 0 if left == 0 else 1
    finally:
        harness.stop()
        shutil.rmtree(harness.run_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.multinode", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "load"])
    parser.add_argument("--database-url", default=DATABASE_URL, help="a database it may drop and recreate")
    parser.add_argument("--redis", choices=REDIS_MODES, default="cluster", help="a Redis Cluster, or Sentinel")
    parser.add_argument("--workers", type=int, default=4, help="reference worker processes")
    parser.add_argument("--rate", type=float, default=200.0, help="load: enqueues per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="load: how long producers run")
    args = parser.parse_args(argv)
    return _up(args) if args.command == "up" else _load(args)


if __name__ == "__main__":
    sys.exit(main())
