"""A task function's arguments as a JSON payload, checked at enqueue: ``{"args": [...], "kwargs": {...}}``.

Anything JSON cannot carry faithfully is refused here, in the process that
enqueues, with the path of the offending value (``kwargs['user']``), never
later inside a worker: an object json does not know, a ``NaN``, a dict key
that is not a string (json would turn ``{1: x}`` into ``{"1": x}`` silently),
a string UTF-8 cannot encode. Tuples travel as lists.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ARGS_KEY", "KWARGS_KEY", "NotSerializable", "arguments_of", "task_payload"]

ARGS_KEY = "args"
KWARGS_KEY = "kwargs"


class NotSerializable(TypeError):
    """A task argument JSON cannot carry; the message names it and says what to pass instead."""


def task_payload(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of a call ``name(*args, **kwargs)``, or ``NotSerializable`` naming the bad argument."""
    return {
        ARGS_KEY: [_plain(value, f"{name}(): args[{index}]") for index, value in enumerate(args)],
        KWARGS_KEY: {key: _plain(value, f"{name}(): kwargs[{key!r}]") for key, value in kwargs.items()},
    }


def arguments_of(payload: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments a payload carries; ``ValueError`` if it has not that shape."""
    args = payload.get(ARGS_KEY, [])
    kwargs = payload.get(KWARGS_KEY, {})
    if not isinstance(args, list) or not isinstance(kwargs, dict) or set(payload) - {ARGS_KEY, KWARGS_KEY}:
        raise ValueError(f'payload is not {{"args": [...], "kwargs": {{...}}}}: keys {sorted(payload)}')
    return args, kwargs


def _plain(value: Any, where: str) -> Any:
    """``value`` as plain JSON data (tuples as lists), or ``NotSerializable`` saying where and why."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotSerializable(f"{where} is {value!r}: JSON has no NaN or infinity")
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise NotSerializable(f"{where} holds a lone surrogate UTF-8 cannot encode") from None
        return value
    if isinstance(value, list | tuple):
        return [_plain(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, dict):
        plain = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotSerializable(f"{where} has the key {key!r}: JSON object keys must be strings")
            plain[key] = _plain(item, f"{where}[{key!r}]")
        return plain
    raise NotSerializable(
        f"{where} is a {type(value).__module__}.{type(value).__qualname__}, which JSON cannot carry: "
        "pass plain data (ids, strings, numbers, lists, dicts) and load objects inside the task"
    )
