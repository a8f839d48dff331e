"""The per-process API key cache: a query saved per request, revocation still honoured."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from queues import apikeys
from queues.apikeys import create_key, revoke_key
from queues.models import ApiKey
from taskforge.infra import change_watch, rowcache
from taskforge.infra.redis import redis_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def empty_cache():
    apikeys.forget_cached_keys()
    yield
    apikeys.forget_cached_keys()


def _get(client, raw: str) -> int:
    return client.get("/queues", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code


def test_a_known_key_is_looked_up_once(client, django_assert_num_queries):
    _, raw = create_key("cached", "producer")
    assert _get(client, raw) == 200
    with django_assert_num_queries(1):  # the queue listing only: no key lookup
        assert _get(client, raw) == 200


def test_revoking_in_this_process_takes_effect_at_once(client):
    _, raw = create_key("revoked-here", "producer")
    assert _get(client, raw) == 200
    assert revoke_key("revoked-here")
    assert _get(client, raw) == 401


def test_a_revocation_by_another_process_takes_effect_at_once(client):
    _, raw = create_key("revoked-elsewhere", "producer")
    assert _get(client, raw) == 200
    # Another process revokes it: its signal announces the change in Redis, not to this cache.
    ApiKey.objects.filter(name="revoked-elsewhere").update(revoked_at=timezone.now())
    change_watch.announce(redis_client(), rowcache.GENERATION_KEY)
    assert _get(client, raw) == 401


def test_entries_expire_even_if_the_generation_is_lost(client, monkeypatch):
    monkeypatch.setattr(rowcache, "MAX_AGE_SECONDS", 0.3)
    _, raw = create_key("flushed", "producer")
    assert _get(client, raw) == 200
    ApiKey.objects.filter(name="flushed").update(revoked_at=timezone.now())  # no bump reaches Redis
    time.sleep(0.35)
    assert _get(client, raw) == 401


def test_unknown_keys_are_never_cached(client):
    for n in range(5):
        assert _get(client, f"tf_unknown_{n:040d}") == 401
    assert len(apikeys._active_keys) == 0


def test_code_on_the_event_loop_gets_only_what_the_process_already_holds():
    """``rowcache.cached_only`` (the lean edge's enqueue on the event loop): a key not read yet is not
    loaded there but refused as NotCached, so the call goes to the thread pool, which loads it."""
    _, raw = create_key("loop-cached", "producer")
    header = f"Bearer {raw}"
    with pytest.raises(rowcache.NotCached), rowcache.cached_only():
        apikeys.key_for(header)
    loaded = apikeys.key_for(header)  # as the thread path does
    with rowcache.cached_only():
        assert apikeys.key_for(header) == loaded
    with pytest.raises(apikeys.exceptions.AuthenticationFailed), rowcache.cached_only():
        apikeys.key_for("Basic nonsense")  # refused as it stands: nothing to look up


def test_without_a_watch_code_on_the_event_loop_trusts_no_copy(monkeypatch):
    """Without the change watch a copy is only trusted after a Redis read, which the loop does not make."""
    _, raw = create_key("loop-unwatched", "producer")
    header = f"Bearer {raw}"
    apikeys.key_for(header)
    monkeypatch.setattr(change_watch, "current", lambda: None)  # as on a Cluster, which has no watch
    with pytest.raises(rowcache.NotCached), rowcache.cached_only():
        apikeys.key_for(header)
