"""Strict input fields: the contract forbids coercion (``"5"`` is not 5, ``1`` is not true)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from rest_framework import serializers

from taskforge.http.fields import (
    AwareDateTimeField,
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    StrictUUIDField,
    parse_aware_datetime,
)


def refuses(field: serializers.Field, value: object) -> bool:
    try:
        field.run_validation(value)
    except serializers.ValidationError:
        return True
    return False


@pytest.mark.parametrize("value", ["5", 5.0, True, False, None, [5]])
def test_an_integer_must_be_a_json_integer(value):
    field = StrictIntegerField(allow_null=False)
    assert refuses(field, value)


def test_an_integer_keeps_its_bounds():
    field = StrictIntegerField(min_value=1, max_value=10)
    assert field.run_validation(10) == 10
    assert refuses(field, 11)
    assert refuses(field, 0)


@pytest.mark.parametrize("value", ["true", 1, 0, "yes", None])
def test_a_boolean_must_be_a_json_boolean(value):
    assert refuses(StrictBooleanField(), value)


def test_a_boolean_passes_through():
    assert StrictBooleanField().run_validation(False) is False


@pytest.mark.parametrize("value", [5, 1.5, True, {"a": 1}, ["x"]])
def test_a_string_must_be_a_json_string(value):
    assert refuses(StrictCharField(), value)


def test_a_string_keeps_its_length_limit():
    field = StrictCharField(max_length=3)
    assert field.run_validation("abc") == "abc"
    assert refuses(field, "abcd")


def test_a_uuid_must_be_a_string_even_when_an_integer_would_convert():
    field = StrictUUIDField()
    assert refuses(field, uuid.UUID(int=5).int)
    assert refuses(field, "not-a-uuid")
    task_id = uuid.uuid4()
    assert field.run_validation(str(task_id)) == task_id


@pytest.mark.parametrize("value", [[], "{}", 1, None])
def test_a_json_object_field_takes_only_objects(value):
    assert refuses(JSONObjectField(allow_null=False), value)


def test_a_json_object_is_kept_as_given():
    payload = {"nested": {"list": [1, "two", None]}}
    assert JSONObjectField().run_validation(payload) == payload


def test_timestamps_need_an_explicit_offset_and_come_back_in_utc():
    assert parse_aware_datetime("2026-05-20T12:00:00Z") == datetime(2026, 5, 20, 12, tzinfo=UTC)
    shifted = parse_aware_datetime("2026-05-20T14:00:00+02:00")
    assert shifted == datetime(2026, 5, 20, 12, tzinfo=UTC)
    assert shifted.utcoffset() == timedelta(0)
    with pytest.raises(ValueError, match="explicit offset"):
        parse_aware_datetime("2026-05-20T12:00:00")
    with pytest.raises(ValueError):
        parse_aware_datetime(1_747_742_400)
    with pytest.raises(ValueError):
        parse_aware_datetime("tomorrow")


def test_offsets_postgres_cannot_store_are_normalised_to_utc():
    parsed = parse_aware_datetime("2026-05-20T12:00:00+23:59")
    assert parsed.tzinfo == UTC
    assert parsed == datetime(2026, 5, 20, 12, tzinfo=timezone(timedelta(hours=23, minutes=59)))


def test_the_ends_of_the_calendar_clamp_instead_of_overflowing():
    assert parse_aware_datetime("0001-01-01T00:00:00+05:00") == datetime.min.replace(tzinfo=UTC)
    assert parse_aware_datetime("9999-12-31T23:59:59-05:00") == datetime.max.replace(tzinfo=UTC)


def test_the_timestamp_field_names_the_expected_format():
    with pytest.raises(serializers.ValidationError) as caught:
        AwareDateTimeField().run_validation("2026-05-20 12:00")
    assert "explicit offset" in str(caught.value.detail[0])


class Body(StrictSerializer):
    priority = StrictIntegerField(required=False)


def test_a_strict_serializer_refuses_unknown_and_read_only_fields_by_name():
    body = Body(data={"priority": 3, "status": "done", "attempts": 0})
    assert not body.is_valid()
    assert set(body.errors) == {"status", "attempts"}
    assert body.errors["status"] == ["Unknown or read-only field."]


@pytest.mark.parametrize("data", [[{"priority": 3}], "text", 3])
def test_a_strict_serializer_refuses_a_body_that_is_not_an_object(data):
    body = Body(data=data)
    assert not body.is_valid()
    assert body.errors == {"non_field_errors": ["Expected a JSON object."]}


def test_a_strict_serializer_accepts_declared_fields():
    body = Body(data={"priority": 3})
    assert body.is_valid(), body.errors
    assert body.validated_data == {"priority": 3}
