"""Log formatters: one JSON object per line or a line for people, each with the request id when there is one.

Records are formatted directly by the formatters settings builds, so the line
format is checked without a request or a database; what the API and the loops
log is in tests/integration/observability/test_logs.py.
"""

from __future__ import annotations

import json
import logging
import logging.config
from datetime import UTC, datetime

import pytest
from django.conf import settings

from taskforge.ops.logs import JsonFormatter, TextFormatter, log_batch

#: 2023-11-14T22:13:20.123Z, the instant every record below is stamped with.
CREATED = 1_700_000_000.123
STAMP = "2023-11-14T22:13:20.123Z"


def formatter_from_settings(name: str) -> logging.Formatter:
    """The formatter ``name`` exactly as the LOGGING setting constructs it."""
    factory = logging.config.DictConfigurator({}).configure_custom
    return factory(dict(settings.LOGGING["formatters"][name]))


def record(msg: str, extra: dict | None = None, *, level: int = logging.INFO) -> logging.LogRecord:
    made = logging.getLogger("taskforge.transitions").makeRecord(
        "taskforge.transitions", level, __file__, 1, msg, (), None, extra=extra
    )
    made.created = CREATED
    return made


def test_a_json_line_starts_with_time_level_logger_message_then_the_extras():
    line = formatter_from_settings("json").format(
        record("task t1 pending -> claimed", {"event": "task.transition", "task_id": "t1", "request_id": "r1"})
    )
    assert "\n" not in line
    parsed = json.loads(line)
    assert list(parsed)[:4] == ["ts", "level", "logger", "message"]
    assert parsed["ts"] == STAMP
    assert (parsed["level"], parsed["logger"]) == ("INFO", "taskforge.transitions")
    assert parsed["message"] == "task t1 pending -> claimed"
    assert (parsed["event"], parsed["task_id"], parsed["request_id"]) == ("task.transition", "t1", "r1")


def test_both_formats_stamp_utc_with_milliseconds():
    assert JsonFormatter().formatTime(record("x")) == STAMP
    assert TextFormatter().formatTime(record("x")) == STAMP


def test_a_text_line_is_for_people_and_ends_with_the_request_id():
    formatter = formatter_from_settings("text")
    assert formatter.format(record("hello", {"request_id": "r-42"}, level=logging.WARNING)) == (
        f"{STAMP} WARNING taskforge.transitions hello [r-42]"
    )
    assert formatter.format(record("hello")) == f"{STAMP} INFO    taskforge.transitions hello"


@pytest.mark.parametrize("formatter_name", ["json", "text"])
def test_a_batch_record_writes_the_lines_single_records_would(formatter_name):
    """observe.transitions logs a batch as one record: the output must not tell the difference."""
    formatter = formatter_from_settings(formatter_name)
    entries = [
        (f"task t{n} pending -> claimed in q ({n}.0 ms)", {"event": "task.transition", "task_id": f"t{n}", "n": n})
        for n in range(3)
    ]
    singles = [formatter.format(record(message, {**fields, "request_id": "r1"})) for message, fields in entries]
    batched = formatter.format(record("3 line(s)", {"batch": entries, "request_id": "r1"}))
    assert batched.split("\n") == singles
    if formatter_name == "json":
        assert [json.loads(line)["n"] for line in singles] == [0, 1, 2]


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def collected():
    logger = logging.getLogger("taskforge.unit.batch")
    handler = Collect()
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, handler.records
    logger.removeHandler(handler)
    logger.propagate = True


def test_log_batch_emits_one_record_carrying_every_line(collected):
    logger, records = collected
    batch = [("a", {"n": 1}), ("b", {"n": 2})]
    log_batch(logger, logging.INFO, batch)
    (only,) = records
    assert only.getMessage() == "2 line(s)"
    assert only.batch == batch


def test_log_batch_emits_nothing_for_an_empty_batch_or_a_disabled_level(collected):
    logger, records = collected
    log_batch(logger, logging.INFO, [])
    log_batch(logger, logging.DEBUG, [("a", {})])
    assert records == []


@pytest.mark.parametrize(
    "created",
    [
        CREATED,
        1_700_000_000.9999996,  # rounds up into the next second
        1_700_000_000.0000004,
        1_699_999_999.9995,
        1_700_000_059.9999999,  # and into the next minute
        *(1_700_000_000 + n * 7_919.000_123_7 for n in range(50)),
    ],
)
def test_a_lines_stamp_is_what_datetime_makes_of_its_time_to_the_millisecond(created):
    """The stamp reuses the date and time up to the second from the line before: every line still says its own."""
    moment = datetime.fromtimestamp(created, tz=UTC)
    expected = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    made = record("x")
    made.created = created
    assert json.loads(formatter_from_settings("json").format(made))["ts"] == expected
