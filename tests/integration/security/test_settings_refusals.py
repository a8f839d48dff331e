"""Settings that would do harm are refused at start, with a message naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.live import ROOT

_STRIP = ("DJANGO_", "TASKFORGE_", "DATABASE_URL", "REDIS_URL")
BASE = {
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/unused",  # `check` needs no connection
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "DJANGO_SECRET_KEY": "a-strong-random-secret-for-this-test-0123456789",
}


def _check(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(_STRIP)}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**base, **BASE, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_retention_of_zero_days_is_refused_it_would_delete_every_finished_task() -> None:
    done = _check(TASKFORGE_RETENTION_DAYS="0")
    assert done.returncode != 0
    assert "TASKFORGE_RETENTION_DAYS must be between 1 and 3650, got 0" in done.stderr


@pytest.mark.parametrize(("proxies", "ok"), [("", True), ("10.0.0.0/8, 192.168.1.7", True), ("proxy.local", False)])
def test_one_day_of_retention_is_accepted_and_trusted_proxies_must_be_addresses(proxies: str, ok: bool) -> None:
    done = _check(TASKFORGE_RETENTION_DAYS="1", TASKFORGE_TRUSTED_PROXIES=proxies)
    assert (done.returncode == 0) is ok, done.stderr
    if not ok:
        assert "TASKFORGE_TRUSTED_PROXIES: 'proxy.local' is not an IP address or network" in done.stderr
