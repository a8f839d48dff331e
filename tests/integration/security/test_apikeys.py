"""API keys: random with an identifying prefix, stored only as a hash, never logged, audited."""

from __future__ import annotations

import io
import logging

import pytest
from django.core.management import call_command
from django.db import connection

from queues.apikeys import KEY_PREFIX, create_key, hash_key, revoke_key
from queues.models import ApiKey

pytestmark = pytest.mark.django_db


def _create_by_command(name: str, role: str = "producer") -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_key", name, "--role", role, stdout=out, stderr=err)
    raw = out.getvalue().strip().splitlines()[-1]
    assert raw not in err.getvalue()
    return raw


def test_created_key_is_random_prefixed_and_printed_as_last_stdout_line():
    first, second = _create_by_command("a"), _create_by_command("b")
    assert first != second
    for raw in (first, second):
        assert raw.startswith(KEY_PREFIX)
        assert len(raw) >= len(KEY_PREFIX) + 43  # 32 random bytes, url-safe base64
    key = ApiKey.objects.get(name="a")
    assert key.prefix == first[:10]
    assert key.key_hash == hash_key(first)


def test_the_raw_key_is_stored_nowhere_in_the_database():
    raw = _create_by_command("stored")
    secret_part = raw[10:]  # everything after the shown prefix
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(k)::text FROM tf_api_key k")
        rows = [row[0] for row in cursor.fetchall()]
    assert rows
    assert not any(secret_part in row for row in rows)


def test_a_key_works_until_revoked_then_is_refused_at_once(client):
    _, raw = create_key("revocable", "producer")
    headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert client.get("/queues", **headers).status_code == 200
    call_command("revoke_api_key", "revocable", stdout=io.StringIO())
    refused = client.get("/queues", **headers)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize(
    "header",
    ["Bearer tf_not-a-real-key-but-long-enough-to-look-right", "Bearer ", "Basic dXNlcjpwYXNz", "tf_no_scheme"],
)
def test_unknown_or_malformed_credentials_are_401_without_echoing_them(client, header):
    response = client.get("/queues", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    secret = header.partition(" ")[2] if " " in header else header
    if len(secret) > 8:
        assert secret not in response.content.decode()


def test_a_known_hash_prefix_or_the_hash_itself_is_not_a_key(client):
    _, raw = create_key("hashed", "admin")
    key = ApiKey.objects.get(name="hashed")
    for candidate in (key.key_hash, key.prefix, raw[:-1], raw + "x", raw.upper()):
        assert client.get("/queues", HTTP_AUTHORIZATION=f"Bearer {candidate}").status_code == 401


def test_keys_never_appear_in_logs(client, caplog):
    caplog.set_level(logging.DEBUG)
    _, good = create_key("logged", "producer")
    bad = "tf_" + "x" * 43
    client.get("/queues", HTTP_AUTHORIZATION=f"Bearer {good}")
    client.get("/queues", HTTP_AUTHORIZATION=f"Bearer {bad}")
    client.post("/queues", {"name": "q"}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {good}")
    raw_cmd = _create_by_command("logged-cmd")
    call_command("revoke_api_key", "logged-cmd", stdout=io.StringIO())
    everything = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert caplog.records  # requests were logged: the check below is not vacuous
    for secret in (good, bad, raw_cmd):
        assert secret not in everything
        assert secret[10:] not in everything


def test_create_and_revoke_are_audited_with_the_actor(caplog):
    caplog.set_level(logging.INFO, logger="taskforge.ops.audit")
    _create_by_command("audited", role="worker")
    call_command("revoke_api_key", "audited", stdout=io.StringIO())
    create_key("by-admin", "producer", actor="alice")
    revoke_key("by-admin", actor="alice")
    events = [
        (r.event, r.key_name, r.actor)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "taskforge.ops.audit"
    ]
    assert events[0][:2] == ("apikey.created", "audited")
    assert events[0][2].startswith("cli:")
    assert events[1][:2] == ("apikey.revoked", "audited")
    assert events[1][2].startswith("cli:")
    assert events[2:] == [("apikey.created", "by-admin", "alice"), ("apikey.revoked", "by-admin", "alice")]


def test_revoking_an_unknown_or_revoked_key_is_not_audited(caplog):
    caplog.set_level(logging.INFO, logger="taskforge.ops.audit")
    assert not revoke_key("nobody", actor="alice")
    assert not [r for r in caplog.records if r.name == "taskforge.ops.audit"]
