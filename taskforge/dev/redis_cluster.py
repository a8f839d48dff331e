"""A real Redis Cluster of three primaries and three replicas on free loopback ports, from the
redis-server and redis-cli binaries: for the Cluster tests and the doorbell measurement
(``bench/doorbell.py``), never for production.

The nodes keep nothing on disk but their cluster state (no RDB, no AOF) and call
a silent peer failed after one second, so a killed primary's replica is promoted
within a few seconds.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.cluster import key_slot

from taskforge.dev.launcher import free_ports

PRIMARIES = 3
#: How long a node may stay silent before its peers call it failed: short, so a failover takes seconds.
NODE_TIMEOUT_MS = 1000


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``check`` until it is true; a Redis or socket error counts as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


@dataclass
class LocalCluster:
    directory: Path
    ports: list[int] = field(default_factory=lambda: free_ports(2 * PRIMARIES))
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    # Each node's cluster bus port, none of them a data port.
    bus_ports: dict[int, int] = field(init=False)

    def __post_init__(self) -> None:
        self.bus_ports = dict(zip(self.ports, free_ports(len(self.ports), exclude=self.ports), strict=True))

    def url(self) -> str:
        """A ``redis+cluster://`` URL naming the first primaries (the client learns the rest from them)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports[:PRIMARIES])

    def start(self) -> None:
        for port in self.ports:
            self._server(port)
        create = [
            "redis-cli", "--cluster", "create", *(f"127.0.0.1:{port}" for port in self.ports),
            "--cluster-replicas", "1", "--cluster-yes",
        ]  # fmt: skip
        done = subprocess.run(create, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{done.stdout}{done.stderr}")
        wait_for("every node to see the whole cluster", self._settled, timeout=60)

    def _settled(self) -> bool:
        for port in self.live_ports():
            info: Any = self.node(port).cluster("info")
            if info["cluster_state"] != "ok" or int(info["cluster_known_nodes"]) != len(self.ports):
                return False
        replicas = [port for port in self.live_ports() if self.role(port) == "slave"]
        return len(replicas) == len(self.processes) - PRIMARIES and all(
            self.node(port).info("replication")["master_link_status"] == "up" for port in replicas
        )

    def _server(self, port: int) -> None:
        bus_port = self.bus_ports[port]
        argv = [
            "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(self.directory), "--cluster-enabled", "yes", "--cluster-port", str(bus_port),
            "--cluster-config-file", f"nodes-{port}.conf", "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
        ]  # fmt: skip
        log = (self.directory / f"redis-{port}.log").open("wb")
        self.processes[port] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_for(f"redis on port {port}", lambda: bool(self.node(port).ping()), timeout=10)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2)

    def live_ports(self) -> list[int]:
        return [port for port, process in self.processes.items() if process.poll() is None]

    def role(self, port: int) -> str:
        return str(self.node(port).info("replication")["role"])

    def primaries(self) -> list[int]:
        return [port for port in self.live_ports() if self.role(port) == "master"]

    def primary_for(self, key: str) -> int:
        """The port of the primary serving ``key``'s slot, as the cluster itself says."""
        slot = key_slot(key.encode())
        for port in self.live_ports():
            try:
                shards: Any = self.node(port).execute_command("CLUSTER", "SLOTS")
            except redis.RedisError:
                continue
            for start, end, primary, *_ in shards:
                if start <= slot <= end:
                    return int(primary[1])
        raise LookupError(f"no node serves slot {slot}")

    def replica_of(self, primary_port: int) -> int:
        for port in self.live_ports():
            replication: Any = self.node(port).info("replication")
            if replication["role"] == "slave" and int(replication["master_port"]) == primary_port:
                return port
        raise LookupError(f"{primary_port} has no replica")

    def flush(self) -> None:
        for port in self.primaries():
            self.node(port).flushdb()

    def kill_primary_and_await_promotion(self, primary_port: int, timeout: float = 60.0) -> int:
        """SIGKILL the primary, then wait until its replica is a primary the whole cluster agrees on.

        Returns the promoted replica's port.
        """
        replica = self.replica_of(primary_port)
        process = self.processes.pop(primary_port)
        process.kill()
        process.wait(10)
        wait_for("the replica to be promoted", lambda: self.role(replica) == "master", timeout)
        wait_for("the cluster to be whole again", lambda: all(
            self.node(port).cluster("info")["cluster_state"] == "ok" for port in self.live_ports()
        ), timeout)  # fmt: skip
        return replica

    def rejoin(self, port: int, timeout: float = 60.0) -> None:
        """Start a killed node again: its saved cluster state makes it a replica of its promoted peer."""
        self._server(port)
        wait_for("the node to rejoin the cluster as a replica", self._settled, timeout)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)
