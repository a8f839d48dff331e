"""Keyset cursors and strict query parameters: malformed input is a 400 naming the parameter."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.http import QueryDict
from rest_framework.exceptions import ValidationError

from taskforge.http.pagination import QueryParams, decode_cursor, encode_cursor

AT = datetime(2026, 5, 20, 12, 0, 0, 123456, tzinfo=UTC)


def test_a_cursor_round_trips_to_the_same_instant_and_id():
    row_id = uuid.uuid4()
    cursor = encode_cursor(AT, row_id)
    assert decode_cursor(cursor) == (AT, row_id)
    # URL-safe without escaping: no padding, no '+' or '/'.
    assert not set(cursor) & {"=", "+", "/"}


def test_a_cursor_written_in_another_offset_decodes_to_the_same_instant():
    row_id = uuid.uuid4()
    local = AT.astimezone(timezone(timedelta(hours=-7)))
    assert decode_cursor(encode_cursor(local, row_id)) == (AT, row_id)


def raw_cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "%%%",
        "not base64 at all",
        raw_cursor("[]"),
        raw_cursor('["2026-05-20T12:00:00Z"]'),
        raw_cursor('["2026-05-20T12:00:00Z", 5]'),
        raw_cursor('["2026-05-20T12:00:00Z", "not-a-uuid"]'),
        raw_cursor('["2026-05-20T12:00:00", "5f3c1e9a-7d42-4b8e-9a1c-2e6f0b3d8c71"]'),  # naive
        raw_cursor('[5, "5f3c1e9a-7d42-4b8e-9a1c-2e6f0b3d8c71"]'),
        raw_cursor("{not json"),
    ],
)
def test_a_malformed_cursor_is_a_400_on_the_cursor_parameter(cursor):
    with pytest.raises(ValidationError) as caught:
        decode_cursor(cursor)
    assert caught.value.detail == {"cursor": ["Malformed cursor."]}


def params(query: str, *allowed: str) -> QueryParams:
    return QueryParams(QueryDict(query), frozenset(allowed))


def error_of(call) -> dict:
    with pytest.raises(ValidationError) as caught:
        call()
    return caught.value.detail


def test_an_unknown_parameter_is_refused_by_name():
    assert set(error_of(lambda: params("stauts=dead&limit=5", "status", "limit"))) == {"stauts"}


def test_limit_defaults_and_bounds():
    assert params("", "limit").limit() == 50
    assert params("limit=500", "limit").limit() == 500
    assert params("limit=1", "limit").limit() == 1
    for bad in ["0", "501", "-1", "1.5", "²", "ten", "0000001000000"]:
        assert "limit" in error_of(lambda bad=bad: params(f"limit={bad}", "limit").limit())


def test_choice_text_and_boolean():
    query = params("status=dead&claimed_by=w1&include_replayed=TRUE", "status", "claimed_by", "include_replayed")
    assert query.choice("status", ["pending", "dead"]) == "dead"
    assert query.text("claimed_by") == "w1"
    assert query.boolean("include_replayed") is True
    assert params("", "x").boolean("x", default=True) is True
    assert params("x=0", "x").boolean("x") is False
    assert "status" in error_of(lambda: params("status=lost", "status").choice("status", ["dead"]))
    assert "x" in error_of(lambda: params("x=yes", "x").boolean("x"))
    assert "t" in error_of(lambda: params("t=" + "a" * 201, "t").text("t"))


def test_a_timestamp_whose_plus_arrived_as_a_space_is_still_read():
    query = params("created_after=2026-05-20T14:00:00 02:00", "created_after")
    assert query.timestamp("created_after") == datetime(2026, 5, 20, 12, tzinfo=UTC)
    assert "created_after" in error_of(
        lambda: params("created_after=yesterday", "created_after").timestamp("created_after")
    )


def test_the_cursor_parameter_decodes_or_is_absent():
    row_id = uuid.uuid4()
    assert params("", "cursor").cursor() is None
    assert params(f"cursor={encode_cursor(AT, row_id)}", "cursor").cursor() == (AT, row_id)
