"""A real Redis primary, one replica and three sentinels on free ports, for failover tests."""

from __future__ import annotations

import functools
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from tests.live import free_port

MASTER_NAME = "tfprimary"
SENTINELS = 3
QUORUM = 2


def _wait(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except redis.RedisError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@dataclass
class SentinelCluster:
    directory: Path
    primary_port: int = field(default_factory=free_port)
    replica_port: int = field(default_factory=free_port)
    sentinel_ports: list[int] = field(default_factory=lambda: [free_port() for _ in range(SENTINELS)])
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{MASTER_NAME}/{db}"

    def start(self) -> None:
        self._server(self.primary_port)
        self._server(self.replica_port, "--replicaof", "127.0.0.1", str(self.primary_port))
        for port in self.sentinel_ports:
            conf = self.directory / f"sentinel-{port}.conf"
            # Sentinel rewrites its config file (what it learns), so each gets its own.
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.primary_port} {QUORUM}\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
                f"sentinel failover-timeout {MASTER_NAME} 10000\n"
            )
            self._spawn(port, ["redis-server", str(conf), "--sentinel"])
        _wait(
            "the replica to sync",
            lambda: self.node(self.replica_port).info("replication")["master_link_status"] == "up",
        )
        # A failover needs every sentinel to know the replica and a quorum of its peers.
        for port in self.sentinel_ports:
            _wait(f"sentinel {port} to see the replica and its peers", functools.partial(self._sentinel_ready, port))

    def _sentinel_ready(self, port: int) -> bool:
        state: Any = self.node(port).sentinel_master(MASTER_NAME)
        return bool(state["num-slaves"] >= 1 and state["num-other-sentinels"] >= SENTINELS - 1)

    def _server(self, port: int, *extra: str) -> None:
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self._spawn(port, [*argv, "--dir", str(self.directory), *extra])

    def _spawn(self, port: int, argv: list[str]) -> None:
        log = (self.directory / f"redis-{port}.log").open("wb")
        self.processes[port] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        _wait(f"redis on port {port}", lambda: bool(self.node(port).ping()), timeout=10)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2)

    def primary_port_named(self) -> int:
        """The primary's port, as the first sentinel names it."""
        address: Any = self.node(self.sentinel_ports[0]).sentinel_get_master_addr_by_name(MASTER_NAME)
        return int(address[1])

    def kill_primary_and_await_promotion(self, timeout: float = 60.0) -> None:
        """SIGKILL the primary, then wait until the sentinels name the replica and it accepts writes."""
        process = self.processes.pop(self.primary_port)
        process.kill()
        process.wait(10)
        _wait("sentinel to promote the replica", lambda: self.primary_port_named() == self.replica_port, timeout)
        _wait(
            "the replica to become primary",
            lambda: self.node(self.replica_port).info("replication")["role"] == "master",
        )

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)
