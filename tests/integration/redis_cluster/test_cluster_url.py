"""The redis+cluster:// URL: what it means, and a malformed one stops the process at start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from taskforge.infra.redis import cluster_target, database_number
from tests.live import ROOT


def test_nodes_credentials_and_tls():
    target = cluster_target("rediss+cluster://tf:s3cret@n0:7000,n1,[::1]:7002/0")

    assert target is not None
    assert target.nodes == (("n0", 7000), ("n1", 6379), ("::1", 7002))
    assert (target.username, target.password, target.tls) == ("tf", "s3cret", True)
    assert target.node_kwargs({"socket_timeout": 2}) == {
        "socket_timeout": 2, "username": "tf", "password": "s3cret", "ssl": True,
    }  # fmt: skip


def test_plain_cluster_url_has_no_tls_and_other_schemes_are_not_cluster():
    target = cluster_target("redis+cluster://:pw@n0:7000")

    assert target is not None and (target.username, target.password, target.tls) == (None, "pw", False)
    assert "ssl" not in target.node_kwargs({})
    assert cluster_target("redis://127.0.0.1:6379/0") is None
    assert cluster_target("redis+sentinel://s0:26379/primary/0") is None


def test_a_cluster_has_database_zero_only():
    assert database_number("redis+cluster://n0:7000") == 0
    assert database_number("redis+cluster://n0:7000/0") == 0
    assert database_number("redis://127.0.0.1:6379/9") == 9
    assert database_number("redis+sentinel://s0:26379/primary/3") == 3


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("redis+cluster://n0:7000/3", "a Redis Cluster has only database 0"),
        ("redis+cluster://n0:7000/zero", "a Redis Cluster has only database 0"),
        ("redis+cluster://n0:port", "not a number"),
        ("redis+cluster://n0:7000,:7001", "has no host"),
        ("redis+cluster://n0:7000?read_from_replicas=true", "unknown parameter(s) read_from_replicas"),
    ],
)
def test_malformed_url_is_refused_with_the_expected_shape(url, names):
    with pytest.raises(ImproperlyConfigured) as refused:
        cluster_target(url)

    assert names in str(refused.value)
    assert "redis+cluster://[[username]:password@]host1:port1,host2:port2[/0]" in str(refused.value)


def test_malformed_cluster_url_stops_the_process_at_start():
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["REDIS_URL"] = "redis+cluster://n0:7000/2"
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode != 0
    assert "REDIS_URL: '/2': a Redis Cluster has only database 0" in done.stderr
