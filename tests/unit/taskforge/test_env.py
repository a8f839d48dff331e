"""The typed environment readers: a bad value stops start-up with a message naming the variable."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from taskforge.env import env_bool, env_int, env_list, env_optional, env_str

NAME = "TASKFORGE_UNIT_TEST_VARIABLE"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(NAME, raising=False)

    def set_to(value: str) -> None:
        monkeypatch.setenv(NAME, value)

    return set_to


def test_unset_variables_take_their_defaults(env):
    assert env_str(NAME, "fallback") == "fallback"
    assert env_optional(NAME) is None
    assert env_bool(NAME, True) is True
    assert env_int(NAME, 42) == 42
    assert env_list(NAME, "a, b") == ["a", "b"]


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", " yes ", "On"])
def test_booleans_accept_the_usual_true_spellings(env, raw):
    env(raw)
    assert env_bool(NAME, False) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "off", ""])
def test_booleans_accept_the_usual_false_spellings_and_empty(env, raw):
    env(raw)
    assert env_bool(NAME, True) is False


@pytest.mark.parametrize("raw", ["2", "enabled", "y"])
def test_anything_else_is_not_a_boolean(env, raw):
    env(raw)
    with pytest.raises(ImproperlyConfigured, match=f"{NAME} must be a boolean.*{raw!r}"):
        env_bool(NAME, False)


def test_integers_parse_and_blank_means_the_default(env):
    env("17")
    assert env_int(NAME, 1) == 17
    env("   ")
    assert env_int(NAME, 5) == 5


@pytest.mark.parametrize("raw", ["1.5", "ten", "0x10"])
def test_a_non_integer_is_refused(env, raw):
    env(raw)
    with pytest.raises(ImproperlyConfigured, match=f"{NAME} must be an integer"):
        env_int(NAME, 1)


def test_integer_bounds_are_inclusive_and_named_in_the_error(env):
    env("10")
    assert env_int(NAME, 1, minimum=10, maximum=10) == 10
    env("9")
    with pytest.raises(ImproperlyConfigured, match="between 10 and 20, got 9"):
        env_int(NAME, 15, minimum=10, maximum=20)
    env("-1")
    with pytest.raises(ImproperlyConfigured, match=">= 0, got -1"):
        env_int(NAME, 1)


def test_optional_strips_and_treats_blank_as_unset(env):
    env("  postgres://db  ")
    assert env_optional(NAME) == "postgres://db"
    env("  ")
    assert env_optional(NAME) is None


def test_lists_split_on_commas_and_drop_blanks(env):
    env(" a.example , ,b.example,")
    assert env_list(NAME, "ignored") == ["a.example", "b.example"]
    env("")
    assert env_list(NAME, "ignored") == []


def test_strings_are_returned_as_written(env):
    env("  spaced  ")
    assert env_str(NAME, "x") == "  spaced  "
