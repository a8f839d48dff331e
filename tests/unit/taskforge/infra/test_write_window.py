"""WriteWindow: at once after a quiet window, else one write by its thread at the window's end."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from taskforge.infra.write_window import WriteWindow


def _until(condition, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return False


def test_a_window_is_open_only_for_its_length_after_a_write() -> None:
    window = WriteWindow(0.2, lambda: None, thread_name="test-window")
    assert not window.open()  # nothing written yet: a move goes at once
    window.wrote()
    assert window.open()
    time.sleep(0.25)
    assert not window.open()
    window.wrote()
    window.forget()
    assert not window.open()


def test_moves_within_a_window_are_written_once_by_its_thread_at_its_end() -> None:
    writes: list[tuple[float, str]] = []
    window = WriteWindow(
        0.3, lambda: writes.append((time.monotonic(), threading.current_thread().name)), thread_name="test-window"
    )
    window.wrote()
    started = window.written_at
    for _ in range(5):  # five moves in the window: one write
        window.write_at_end()
    time.sleep(0.1)
    assert writes == []  # not before the window ends
    assert _until(lambda: len(writes) == 1)
    time.sleep(0.1)
    assert len(writes) == 1
    at, thread = writes[0]
    assert at >= started + 0.3 - 0.001 and thread == "test-window"


def test_a_failed_write_is_logged_and_the_thread_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    attempts: list[int] = []

    def write() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("disk full")

    window = WriteWindow(0.05, write, thread_name="test-window")
    with caplog.at_level(logging.ERROR, logger="taskforge.metrics"):
        window.write_at_end()
        assert _until(lambda: len(attempts) == 1)
        assert _until(lambda: any(r.getMessage() == "writing metrics failed" for r in caplog.records))
    window.write_at_end()
    assert _until(lambda: len(attempts) == 2)
