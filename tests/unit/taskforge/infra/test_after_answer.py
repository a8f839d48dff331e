"""Work deferred until a request's answer is sent (taskforge.infra.after_answer): when it runs, in what order."""

from __future__ import annotations

import asyncio
import logging

import pytest

from taskforge.infra.after_answer import after_answer, answering, detached


def test_work_deferred_in_a_request_runs_when_its_deferred_work_runs_in_order():
    done: list[str] = []

    async def bell() -> None:
        await asyncio.sleep(0)
        done.append("bell")

    async def request() -> None:
        with answering() as deferred:
            await after_answer(bell)
            await after_answer(lambda: done.append("line"))
            done.append("answer sent")
            await deferred.run()
            await deferred.run()  # again: nothing left to run

    asyncio.run(request())
    assert done == ["answer sent", "bell", "line"]


def test_without_a_request_or_once_it_was_answered_work_runs_at_once():
    done: list[str] = []

    async def scenario() -> None:
        await after_answer(lambda: done.append("no request"))
        with answering() as deferred:
            await deferred.run()
            await after_answer(lambda: done.append("after its answer"))
            done.append("then")

    asyncio.run(scenario())
    assert done == ["no request", "after its answer", "then"]


def test_a_task_started_detached_runs_its_work_at_once_though_started_within_a_request():
    done: list[str] = []

    async def for_several_requests() -> None:
        await after_answer(lambda: done.append("statement's bell"))

    async def request() -> None:
        with answering() as deferred:
            await asyncio.get_running_loop().create_task(for_several_requests(), context=detached())
            assert done == ["statement's bell"]
            await deferred.run()

    asyncio.run(request())


def test_a_failing_work_is_logged_and_the_next_ones_still_run(caplog: pytest.LogCaptureFixture):
    done: list[str] = []

    def broken() -> None:
        raise RuntimeError("redis went away")

    async def request() -> None:
        with answering() as deferred:
            await after_answer(broken)
            await after_answer(lambda: done.append("line"))
            await deferred.run()

    with caplog.at_level(logging.ERROR, logger="taskforge.http"):
        asyncio.run(request())
    assert done == ["line"]
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "after_answer.error"]
    assert record.exc_info is not None and "redis went away" in str(record.exc_info[1])
