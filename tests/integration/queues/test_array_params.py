"""Array literals read back by Postgres as the arrays they were, for every element type the statements send."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import orjson
import pytest
from psycopg.types.json import Jsonb

from queues.lifecycle.rows import fetch_rows

pytestmark = pytest.mark.django_db

AWKWARD_TEXT = ['a"b', "back\\slash", "{brace}", "comma,x", "NULL", "", " padded ", "ünï €", "it's", '\\"', "a\nb\tc"]


def test_text_arrays_keep_every_character():
    rows = fetch_rows("SELECT t FROM unnest(%(texts)s::text[]) AS t", {"texts": [*AWKWARD_TEXT, None]})
    assert [row["t"] for row in rows] == [*AWKWARD_TEXT, None]


def test_uuid_int_boolean_and_timestamp_arrays_round_trip():
    ids = [uuid.uuid4(), uuid.uuid4()]
    moment = datetime.now(UTC)
    rows = fetch_rows(
        "SELECT * FROM unnest(%(ids)s::uuid[], %(counts)s::bigint[], %(flags)s::boolean[], %(times)s::timestamptz[])"
        " AS r(id, count, flag, at)",
        {"ids": ids, "counts": [2**40, None], "flags": [True, None], "times": [moment, None]},
    )
    assert [(r["id"], r["count"], r["flag"], r["at"]) for r in rows] == [
        (ids[0], 2**40, True, moment),
        (ids[1], None, None, None),
    ]


def test_json_arrays_keep_their_documents():
    documents = [{"k": 'v"\\', "nested": [1, {"z": None}]}, {"é": "{,}"}]
    rows = fetch_rows(
        "SELECT d::text AS d FROM unnest(%(docs)s::jsonb[]) AS d",
        {"docs": [Jsonb(documents[0]), None, Jsonb(documents[1])]},
    )
    assert [None if r["d"] is None else orjson.loads(r["d"]) for r in rows] == [documents[0], None, documents[1]]


def test_an_uncast_array_compares_with_any():
    ids = [uuid.uuid4(), uuid.uuid4()]
    rows = fetch_rows("SELECT %(one)s::uuid = ANY(%(ids)s) AS hit", {"one": ids[1], "ids": ids})
    assert rows == [{"hit": True}]
