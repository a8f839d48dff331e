"""The admin search box's key=value terms as payload containments (dashboard.admin.search)."""

from __future__ import annotations

import pytest

from dashboard.admin.search import MAX_PATH_DEPTH, payload_containments


def test_key_equals_value_is_a_string_containment():
    assert payload_containments("user_id=abc123") == [{"user_id": "abc123"}]
    assert payload_containments(" user_id = abc123 ") == [{"user_id": "abc123"}]


def test_a_value_that_reads_as_json_also_matches_typed():
    assert payload_containments("n=42") == [{"n": "42"}, {"n": 42}]
    assert payload_containments("ok=true") == [{"ok": "true"}, {"ok": True}]
    assert payload_containments("gone=null") == [{"gone": "null"}, {"gone": None}]
    assert payload_containments('tags=["a"]') == [{"tags": '["a"]'}]  # only scalars are typed


def test_dots_look_into_nested_objects():
    assert payload_containments("user.id=7") == [{"user": {"id": "7"}}, {"user": {"id": 7}}]


def test_an_empty_value_matches_the_empty_string():
    assert payload_containments("note=") == [{"note": ""}]


@pytest.mark.parametrize(
    "term",
    ["abc123", "6f1c0e2a-0000-4000-8000-000000000000", "emails.send", "=x", "a..b=1", ".a=1", "a\x00=1"],
)
def test_anything_else_is_not_a_payload_search(term):
    assert payload_containments(term) == []


def test_paths_are_bounded():
    deep = ".".join("k" * MAX_PATH_DEPTH)
    assert payload_containments(f"{deep}=1") != []
    assert payload_containments(f"{deep}.k=1") == []
