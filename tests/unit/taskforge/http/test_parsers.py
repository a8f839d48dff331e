"""The strict JSON body parser: whatever ``jsonb`` cannot store or the contract forbids is a 400 here."""

from __future__ import annotations

import io

import pytest
from rest_framework.exceptions import ParseError, UnsupportedMediaType

from taskforge.http.parsers import MAX_DEPTH, StrictJSONParser, check_json_value, parse_json_object


def parse(raw: bytes, media_type: str = "application/json") -> dict:
    return StrictJSONParser().parse(io.BytesIO(raw), media_type)


def test_an_object_is_parsed():
    assert parse(b'{"payload": {"n": 1, "s": "\\u00e9"}}') == {"payload": {"n": 1, "s": "é"}}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "empty"),
        (b"[1, 2]", "must be a JSON object"),
        (b'"text"', "must be a JSON object"),
        (b'{"a": NaN}', "invalid JSON"),
        (b'{"a": Infinity}', "invalid JSON"),
        (b'{"a": "\\ud800"}', "invalid JSON"),  # a lone surrogate
        (b'{"a": "\xff"}', "invalid JSON"),  # not UTF-8
        (b'{"a": 1,}', "invalid JSON"),
        (b'{"a": "x\\u0000y"}', "\\u0000"),
        (b'{"k\\u0000": 1}', "\\u0000"),
        (b'{"a": ["\\u0000"]}', "\\u0000"),
    ],
)
def test_what_postgres_or_the_contract_refuses_is_a_parse_error(raw, message):
    with pytest.raises(ParseError) as caught:
        parse(raw)
    assert message in str(caught.value.detail)


def nested(depth: int) -> bytes:
    """A document whose containers nest ``depth`` levels, alternating objects and lists."""
    opening = "".join('{"a":' if level % 2 == 0 else "[" for level in range(depth))
    closing = "".join("}" if level % 2 == 0 else "]" for level in reversed(range(depth)))
    return (opening + "1" + closing).encode()


def test_nesting_up_to_the_limit_is_accepted_and_one_more_level_is_refused():
    assert parse_json_object(nested(MAX_DEPTH))
    with pytest.raises(ParseError, match=f"deeper than {MAX_DEPTH}"):
        parse_json_object(nested(MAX_DEPTH + 1))


def test_a_very_deep_value_is_refused_without_exhausting_the_stack():
    value: object = 1
    for _ in range(100_000):
        value = [value]
    with pytest.raises(ParseError, match="deeper"):
        check_json_value({"a": value})


@pytest.mark.parametrize("media_type", ["application/json; charset=utf-8", 'application/json; charset="UTF8"'])
def test_utf8_is_the_only_charset_accepted(media_type):
    assert parse(b'{"a": 1}', media_type) == {"a": 1}


def test_another_charset_is_an_unsupported_media_type():
    with pytest.raises(UnsupportedMediaType):
        parse(b'{"a": 1}', "application/json; charset=latin-1")
