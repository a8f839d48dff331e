"""The redis+sentinel:// URL: what it means, and a malformed one stops the process at start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from taskforge.infra.redis import sentinel_target
from tests.live import ROOT


def test_sentinels_master_name_db_and_passwords():
    target = sentinel_target("redis+sentinel://:s3cret@s0:26380,s1,[::1]:26381/tf-Primary/3?sentinel_password=sp")

    assert target is not None
    assert target.sentinels == (("s0", 26380), ("s1", 26379), ("::1", 26381))
    assert (target.master_name, target.db) == ("tf-Primary", 3)  # case kept: Sentinel's names are case-sensitive
    assert (target.username, target.password, target.sentinel_password) == (None, "s3cret", "sp")


def test_database_defaults_to_zero_and_other_schemes_are_not_sentinel():
    target = sentinel_target("redis+sentinel://user:pw@s0:26379/primary")

    assert target is not None and target.db == 0 and (target.username, target.password) == ("user", "pw")
    assert sentinel_target("redis://127.0.0.1:6379/0") is None
    assert sentinel_target("unix:///run/redis.sock?db=1") is None


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("redis+sentinel://s0:26379", "master name is missing"),
        ("redis+sentinel://s0:port/primary/0", "not a number"),
        ("redis+sentinel://s0:26379/primary/zero", "not /<master-name>/<db>"),
        ("redis+sentinel://s0:26379/primary/0/extra", "not /<master-name>/<db>"),
        ("redis+sentinel://s0:26379/primary/0?ssl=true", "unknown parameter(s) ssl"),
        ("redis+sentinel://:26379/primary/0", "has no host"),
    ],
)
def test_malformed_url_is_refused_with_the_expected_shape(url, names):
    with pytest.raises(ImproperlyConfigured) as refused:
        sentinel_target(url)

    assert names in str(refused.value)
    assert "redis+sentinel://" in str(refused.value)


def test_malformed_sentinel_url_stops_the_process_at_start():
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["REDIS_URL"] = "redis+sentinel://s0:26379"
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode != 0
    assert "REDIS_URL: the master name is missing" in done.stderr
