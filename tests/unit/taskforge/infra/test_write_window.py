"""WriteWindow: at once after a quiet window, else one write by its thread at the window's end."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from taskforge.infra.write_window import WriteWindow
from tests.push_receiver import wait_until


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
    wait_until(lambda: len(writes) == 1, timeout=5, interval=0.005)
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
        wait_until(lambda: len(attempts) == 1, timeout=5, interval=0.005)
        wait_until(lambda: any(r.getMessage() == "writing metrics failed" for r in caplog.records), timeout=5)
    window.write_at_end()
    wait_until(lambda: len(attempts) == 2, timeout=5, interval=0.005)
