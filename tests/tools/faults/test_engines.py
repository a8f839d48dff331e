"""The engines of the multi-node simulation, each started for real from its Debian binary."""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psycopg
import pytest

from faults.engines import HAPROXY, PGBOUNCER, REDIS_SERVER, HAProxy, PgBouncer, SentinelRedis, wait_for


class _Named(BaseHTTPRequestHandler):
    """Answers every GET with its server's port: which backend served the request."""

    def do_GET(self) -> None:
        body = str(self.server.server_address[1]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def backends() -> Iterator[list[ThreadingHTTPServer]]:
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _Named) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(HAPROXY is None, reason="needs haproxy (apt-get install haproxy)")
def test_haproxy_spreads_requests_and_stops_sending_them_to_a_dead_server(backends):
    ports = [server.server_address[1] for server in backends]
    proxy = HAProxy(ports)
    proxy.start()
    try:
        wait_for("both backends to pass their health check", lambda: _served_by(proxy, 20).keys() == set(ports))
        backends[0].shutdown()
        backends[0].server_close()
        # Within the health check's window (2 x 300 ms) every request goes to the live one,
        # and none fails meanwhile: a refused connection is sent to the other server.
        assert set(_served_by(proxy, 30)) == {ports[1]}
    finally:
        proxy.stop()


def _served_by(proxy: HAProxy, requests: int) -> Counter[int]:
    with httpx.Client(base_url=proxy.url, timeout=5) as client:
        return Counter(int(client.get("/").raise_for_status().text) for _ in range(requests))


@pytest.mark.skipif(PGBOUNCER is None, reason="needs pgbouncer (apt-get install pgbouncer)")
def test_pgbouncer_serves_again_after_a_kill_and_restart():
    server_url = os.environ.get("DATABASE_URL", "")
    if not server_url.startswith("postgres") or "@127.0.0.1" not in server_url:
        pytest.skip("PgBouncer here forwards to a Postgres over TCP on loopback (DATABASE_URL)")
    bouncer = PgBouncer(server_url)
    bouncer.start()
    try:
        with psycopg.connect(bouncer.url(), autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        held = psycopg.connect(bouncer.url(), autocommit=True)
        bouncer.restart()
        with pytest.raises(psycopg.OperationalError):
            held.execute("SELECT 1")  # the kill cut it
        with psycopg.connect(bouncer.url(), autocommit=True) as conn:
            assert conn.execute("SELECT 2").fetchone() == (2,)
    finally:
        bouncer.stop()


@pytest.mark.skipif(REDIS_SERVER is None, reason="needs redis-server")
def test_a_sentinel_failover_promotes_the_replica_and_the_old_primary_rejoins(tmp_path: Path):
    nodes = SentinelRedis(tmp_path)
    nodes.start()
    try:
        nodes.client().set("kept", "yes")
        first = nodes.primary_port()
        wait_for("the write to reach the replica", lambda: nodes.node(nodes.ports[1]).get("kept") == b"yes")
        killed, promoted = nodes.fail_over()
        assert killed == first and promoted != first
        assert nodes.primary_port() == promoted
        assert nodes.client().get("kept") == b"yes"  # replicated before the kill
        assert nodes.node(killed).info("replication")["role"] == "slave"
    finally:
        nodes.stop()
