"""The engines TaskForge runs on past one machine, started from their own binaries on free ports.

* :class:`PgBouncer`: transaction pooling in front of a Postgres, restartable.
* :class:`SentinelRedis`: a Redis primary, its replica and three sentinels; the
  primary can be killed and the sentinels promote the replica.
* :class:`ClusterRedis`: a Redis Cluster of three primaries and three replicas
  (``taskforge.dev.redis_cluster``); the primary of the doorbell's shard can be
  killed and the cluster promotes its replica.
* :class:`HAProxy`: one HTTP front for several API servers, round robin, with
  health checks, so a dead server stops getting requests within a second.

Each keeps its configuration, log and data in its own directory and stops
every process it started. Used by the multi-node simulation
(``faults.multinode``) and by the tests of each engine.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.cluster import RedisCluster

from taskforge.dev.launcher import free_port, free_ports
from taskforge.dev.redis_cluster import LocalCluster, wait_for

# Debian installs these under /usr/sbin, which is not on every user's PATH.
PGBOUNCER = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
REDIS_SERVER = shutil.which("redis-server")

SENTINEL_MASTER = "tfprimary"
SENTINELS = 3
QUORUM = 2


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.kill()
    process.wait(10)


def _private_directory(prefix: str) -> Path:
    """A directory a daemon that drops root (PgBouncer, as ``postgres``) can read and write."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres")
        directory.chmod(0o755)
    return directory


# -- PgBouncer ---------------------------------------------------------------------------------


@dataclass
class PgBouncer:
    """PgBouncer in transaction pool mode; any database name is passed through to ``server_url``'s server."""

    server_url: str
    port: int = field(default_factory=free_port)
    directory: Path = field(default_factory=lambda: _private_directory("pgbouncer-"))
    process: subprocess.Popen[bytes] | None = None

    def url(self, database: str | None = None) -> str:
        """``server_url``'s database (or ``database``), reached through PgBouncer."""
        parts = urlsplit(self.server_url)
        name = database or parts.path.lstrip("/")
        return f"postgresql://{parts.username or 'postgres'}@127.0.0.1:{self.port}/{name}"

    def start(self) -> None:
        if PGBOUNCER is None:
            raise RuntimeError("pgbouncer is not installed (Debian: apt-get install -y pgbouncer)")
        server = urlsplit(self.server_url)
        (self.directory / "userlist.txt").write_text(f'"{server.username or "postgres"}" ""\n')
        config = self.directory / "pgbouncer.ini"
        config.write_text(
            f"[databases]\n* = host={server.hostname or '127.0.0.1'} port={server.port or 5432}\n\n"
            f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            "pool_mode = transaction\nauth_type = trust\n"
            f"auth_file = {self.directory}/userlist.txt\nlogfile = {self.directory}/pgbouncer.log\n"
            f"pidfile = {self.directory}/pgbouncer.pid\nmax_client_conn = 1000\ndefault_pool_size = 20\n"
        )
        argv = [PGBOUNCER, str(config)]
        if os.geteuid() == 0:
            argv[1:1] = ["-u", "postgres"]  # it refuses to run as root
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_for(f"pgbouncer on port {self.port}", self._up, timeout=10)

    def _up(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited:\n{self.log()}")
        return _listening(self.port)

    def kill(self) -> None:
        _stop(self.process)
        self.process = None

    def restart(self) -> None:
        """kill -9 and start again on the same port: every client connection is cut."""
        self.kill()
        self.start()

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


# -- Redis with Sentinel -----------------------------------------------------------------------


@dataclass
class SentinelRedis:
    """A Redis primary, one replica and three sentinels; after a failover the old primary rejoins as a replica."""

    directory: Path
    # The two data nodes, then the sentinels: all picked at once, so no two share a port.
    ports: list[int] = field(default_factory=lambda: free_ports(2))
    sentinel_ports: list[int] = field(init=False)
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sentinel_ports = free_ports(SENTINELS, exclude=self.ports)

    def url(self, db: int = 0) -> str:
        """The ``redis+sentinel://`` URL TaskForge is configured with (docs/deployment.md)."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SENTINEL_MASTER}/{db}"

    def start(self) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed")
        primary, replica = self.ports
        self._data_node(primary)
        self._data_node(replica, "--replicaof", "127.0.0.1", str(primary))
        for port in self.sentinel_ports:
            conf = self.directory / f"sentinel-{port}.conf"
            # Sentinel rewrites its config file (what it learns), so each gets its own.
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
                f"sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {primary} {QUORUM}\n"
                f"sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n"
                f"sentinel failover-timeout {SENTINEL_MASTER} 10000\n"
            )
            self._spawn(port, [REDIS_SERVER, str(conf), "--sentinel"])
        wait_for("the replica to sync", lambda: self._linked(replica))
        for port in self.sentinel_ports:
            # A failover needs every sentinel to know the replica and a quorum of its peers.
            wait_for(f"sentinel {port} to see the replica and its peers", functools.partial(self._sentinel_ready, port))

    def _linked(self, port: int) -> bool:
        return bool(self.node(port).info("replication").get("master_link_status") == "up")

    def _sentinel_ready(self, port: int) -> bool:
        state: Any = self.node(port).sentinel_master(SENTINEL_MASTER)
        return bool(state["num-slaves"] >= 1 and state["num-other-sentinels"] >= SENTINELS - 1)

    def _data_node(self, port: int, *extra: str) -> None:
        assert REDIS_SERVER is not None
        argv = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self._spawn(port, [*argv, "--dir", str(self.directory), *extra])

    def _spawn(self, port: int, argv: list[str]) -> None:
        log = (self.directory / f"redis-{port}.log").open("ab")
        self.processes[port] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_for(f"redis on port {port}", lambda: bool(self.node(port).ping()), timeout=10)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2)

    def primary_port(self) -> int:
        """The primary's port, as the first sentinel still running names it."""
        for port in self.sentinel_ports:
            if port in self.processes:
                address: Any = self.node(port).sentinel_get_master_addr_by_name(SENTINEL_MASTER)
                return int(address[1])
        raise RuntimeError("no sentinel is running")

    def client(self) -> redis.Redis:
        """The primary now (what the fault harness flushes or pauses)."""
        return self.node(self.primary_port())

    def flushall(self) -> None:
        self.client().flushall()  # the replica follows

    def fail_over(self, timeout: float = 60.0) -> tuple[int, int]:
        """kill -9 the primary, wait for the promotion, bring the old one back as a replica.

        Returns ``(killed, promoted)``: the two ports.
        """
        killed = self.primary_port()
        promoted = next(port for port in self.ports if port != killed)
        _stop(self.processes.pop(killed))
        wait_for("the sentinels to promote the replica", lambda: self.primary_port() == promoted, timeout)
        wait_for("the replica to accept writes", lambda: self.node(promoted).info("replication")["role"] == "master")
        # Restarted empty, as a replica of the new primary (the sentinels would reconfigure it anyway).
        self._data_node(killed, "--replicaof", "127.0.0.1", str(promoted))
        wait_for("the old primary to rejoin as a replica", lambda: self._linked(killed), timeout)
        return killed, promoted

    def stop(self) -> None:
        for process in self.processes.values():
            _stop(process)
        self.processes.clear()


# -- Redis Cluster ----------------------------------------------------------------------------

#: The doorbell's channel hash tag (``queues.dispatch.doorbell``): a kill of its shard's primary
#: cuts every long poll's subscription as well as that shard's lanes.
DOORBELL_KEY = "tf:wake:{0}"


class ClusterRedis:
    """A local Redis Cluster as the soak's Redis faults see it (as :class:`faults.engines.SentinelRedis` is)."""

    def __init__(self, directory: Path) -> None:
        self.cluster = LocalCluster(directory=directory)

    def url(self, db: int = 0) -> str:
        return self.cluster.url()

    def start(self) -> None:
        self.cluster.start()

    def client(self) -> redis.Redis:
        # A client that follows the slots: the soak's garbage ids go to each lane's own node.
        return RedisCluster(host="127.0.0.1", port=self.cluster.primaries()[0], socket_timeout=2)  # type: ignore[return-value]

    def flushall(self) -> None:
        self.cluster.flush()

    def fail_over(self) -> tuple[int, int]:
        """kill -9 the primary of the doorbell's shard, await the promotion, bring the node back as a replica."""
        victim = self.cluster.primary_for(DOORBELL_KEY)
        promoted = self.cluster.kill_primary_and_await_promotion(victim)
        self.cluster.rejoin(victim)
        return victim, promoted

    def stop(self) -> None:
        self.cluster.stop()


# -- HAProxy -----------------------------------------------------------------------------------


@dataclass
class HAProxy:
    """HTTP round robin over ``backends`` (ports of API servers on loopback), health-checked on ``/healthz``."""

    backends: list[int]
    port: int = field(default_factory=free_port)
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="haproxy-")))
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> str:
        servers = "\n".join(
            f"    server api{n} 127.0.0.1:{port} check inter 300ms fall 2 rise 1"
            for n, port in enumerate(self.backends, 1)
        )
        # Long polls wait up to 30 s for a task: the server timeout is above that.
        # A request is sent to another server only when the connection itself failed
        # (conn-failure): one that reached a server is never replayed elsewhere.
        return f"""global
    maxconn 4096

defaults
    mode http
    timeout connect 2s
    timeout client 65s
    timeout server 65s
    option http-keep-alive
    option forwardfor
    retries 3
    retry-on conn-failure
    option redispatch

frontend api
    bind 127.0.0.1:{self.port}
    default_backend apis

backend apis
    balance roundrobin
    option httpchk GET /healthz
{servers}
"""

    def start(self) -> None:
        if HAPROXY is None:
            raise RuntimeError("haproxy is not installed (Debian: apt-get install -y haproxy)")
        config = self.directory / "haproxy.cfg"
        config.write_text(self.config())
        log = (self.directory / "haproxy.log").open("ab")
        self.process = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT)
        wait_for(f"haproxy on port {self.port}", lambda: _listening(self.port), timeout=10)

    def stop(self) -> None:
        _stop(self.process)
        self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)
