"""Array parameters as Postgres array literals: the text each Python value becomes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from psycopg.types.json import Jsonb

from taskforge.infra.postgres.arrays import array_literal, literal_arrays


def test_numbers_and_uuids_go_bare_and_none_is_null():
    task_id = uuid.UUID("3f2c0000-0000-4000-8000-000000000001")
    assert array_literal([task_id, None]) == "{3f2c0000-0000-4000-8000-000000000001,NULL}"
    assert array_literal([5, -3, None]) == "{5,-3,NULL}"
    assert array_literal([]) == "{}"


def test_booleans_are_t_and_f_not_numbers():
    assert array_literal([True, False]) == "{t,f}"


def test_text_is_quoted_with_quotes_and_backslashes_escaped():
    assert array_literal(['a"b', "c\\d", "NULL", "", "{x,y}"]) == '{"a\\"b","c\\\\d","NULL","","{x,y}"}'


def test_json_and_timestamps_are_quoted_text():
    moment = datetime(2026, 12, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert array_literal([Jsonb({"k": 'v"'})]) == '{"{\\"k\\":\\"v\\\\\\"\\"}"}'
    assert array_literal([moment]) == '{"2026-12-02T03:04:05.678901+00:00"}'


def test_an_unknown_type_is_refused_rather_than_guessed():
    with pytest.raises(TypeError, match="float"):
        array_literal([1.5])


def test_only_lists_are_rewritten():
    params = {"ids": [1, 2], "limit": 10, "name": "q"}
    assert literal_arrays(params) == {"ids": "{1,2}", "limit": 10, "name": "q"}
