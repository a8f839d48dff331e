"""A new API key is shown once on the admin page, and its raw value never travels in a cookie."""

from __future__ import annotations

import pytest

from queues.apikeys import hash_key
from queues.models import ApiKey

pytestmark = pytest.mark.django_db


def test_the_raw_key_is_shown_once_and_set_in_no_cookie(staff_client) -> None:  # type: ignore[no-untyped-def]
    created = staff_client.post("/admin/queues/apikey/add/", {"name": "billing", "role": "producer"})
    assert created.status_code == 302
    shown = staff_client.get(created["Location"])
    page = shown.content.decode()
    key = ApiKey.objects.get(name="billing")
    [raw] = [word.strip("<>.,") for word in page.split() if word.startswith(key.prefix)]
    assert key.key_hash == hash_key(raw.split("<")[0])
    raw = raw.split("<")[0]
    # Django's cookie storage signs but does not encrypt: its (compressed) value decodes to the key.
    for response in (created, shown):
        messages_cookie = response.cookies.get("messages")
        assert messages_cookie is None or not messages_cookie.value, "messages travel in a cookie"
        assert all(raw not in cookie.value for cookie in response.cookies.values())
    assert raw not in staff_client.get(created["Location"]).content.decode(), "shown once"
