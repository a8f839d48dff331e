"""``create_api_key`` prints the raw key as its last stdout line; ``revoke_api_key`` makes it a 401."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from queues.models import ApiKey
from tests.factories import QueueFactory
from tests.live import ROOT

pytestmark = pytest.mark.django_db


def create(name: str, role: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_api_key", name, "--role", role, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def as_key(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.mark.parametrize(
    ("role", "allowed", "forbidden"),
    [
        ("producer", "/queues", "/workers"),
        ("worker", None, "/queues"),
        ("admin", "/workers", None),
    ],
)
def test_created_key_works_with_its_role(role, allowed, forbidden):
    out, err = create(f"ci-{role}", role)
    raw = out.rstrip("\n").splitlines()[-1]
    assert raw.startswith("tf_") and len(raw) >= 32
    assert raw not in err  # shown once, on stdout only
    client = as_key(raw)
    if allowed:
        assert client.get(allowed).status_code == 200
    if forbidden:
        assert client.get(forbidden).status_code == 403
    if role == "worker":
        QueueFactory(name="jobs")
        response = client.post("/workers/claim", {"worker_id": "w", "queue": "jobs"}, format="json")
        assert response.status_code == 200
    key = ApiKey.objects.get(name=f"ci-{role}")
    assert key.role == role
    assert key.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in (key.prefix, key.key_hash)


def test_each_key_is_different():
    first, _ = create("one", "producer")
    second, _ = create("two", "producer")
    assert first.splitlines()[-1] != second.splitlines()[-1]


def test_duplicate_name_is_refused():
    create("dup", "admin")
    with pytest.raises(CommandError, match="already exists"):
        create("dup", "producer")
    assert ApiKey.objects.get(name="dup").role == "admin"


def test_unknown_role_is_refused():
    with pytest.raises(CommandError):
        create("bad", "superuser")
    assert not ApiKey.objects.filter(name="bad").exists()


def test_revoke_makes_the_key_a_401():
    out, _ = create("to-revoke", "producer")
    client = as_key(out.splitlines()[-1])
    assert client.get("/queues").status_code == 200
    revoke_out = StringIO()
    call_command("revoke_api_key", "to-revoke", stdout=revoke_out)
    assert "to-revoke" in revoke_out.getvalue()
    response = client.get("/queues")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert ApiKey.objects.get(name="to-revoke").revoked_at is not None


def test_revoking_twice_or_an_unknown_key_is_an_error():
    create("once", "worker")
    call_command("revoke_api_key", "once", stdout=StringIO())
    with pytest.raises(CommandError, match="no active API key"):
        call_command("revoke_api_key", "once", stdout=StringIO())
    with pytest.raises(CommandError, match="no active API key"):
        call_command("revoke_api_key", "never-existed", stdout=StringIO())


def test_revoking_one_key_leaves_the_others_working():
    a, _ = create("a", "producer")
    b, _ = create("b", "producer")
    call_command("revoke_api_key", "a", stdout=StringIO())
    assert as_key(a.splitlines()[-1]).get("/queues").status_code == 401
    assert as_key(b.splitlines()[-1]).get("/queues").status_code == 200


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_real_commands_print_and_revoke(live_stack):
    """As an operator runs them: manage.py in its own process, the key on the last stdout line."""

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=live_stack.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    created = manage("create_api_key", "ops", "--role", "admin")
    assert created.returncode == 0, created.stderr
    raw = created.stdout.rstrip("\n").splitlines()[-1]
    assert as_key(raw).get("/workers").status_code == 200
    revoked = manage("revoke_api_key", "ops")
    assert revoked.returncode == 0, revoked.stderr
    assert as_key(raw).get("/workers").status_code == 401
    again = manage("revoke_api_key", "ops")
    assert again.returncode != 0
    assert "no active API key" in again.stderr
