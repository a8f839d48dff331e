"""Text-mode logs: a request path cannot break a line or forge another one."""

from __future__ import annotations

import io
import logging
import sys

import pytest
from django.test import Client

from taskforge.ops.logs import TextFormatter

pytestmark = pytest.mark.django_db

FORGED = "/nowhere%0d%0a2026-01-01T00:00:00.000Z INFO    taskforge.ops.audit login succeeded for 'admin'%1b[2J"


@pytest.fixture
def text_access_log():  # type: ignore[no-untyped-def]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    logger = logging.getLogger("taskforge.request")
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)


def test_a_path_with_newlines_and_escapes_stays_on_one_escaped_line(text_access_log) -> None:  # type: ignore[no-untyped-def]
    assert Client().get(FORGED).status_code == 404
    output = text_access_log.getvalue()
    lines = output.splitlines()
    assert len(lines) == 1, output
    assert "GET /nowhere\\x0d\\x0a2026-01-01T00:00:00.000Z INFO" in lines[0]
    assert "\x1b" not in output and "\\x1b[2J" in lines[0]


def test_a_traceback_keeps_its_lines_and_the_message_is_escaped() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "bad\nworker %s", ("w\u2028x",), None)
        record.exc_info = sys.exc_info()
    text = TextFormatter().format(record)
    first, *rest = text.splitlines()
    assert first.endswith("bad\\x0aworker w\\u2028x")
    assert rest and rest[-1] == "ValueError: boom"
