"""``app.tasks.stop_task``: a task that swallows a cancellation (as one reading a reply through
redis-py can) is cancelled again until it is done; a task's exception is retrieved."""

from __future__ import annotations

import asyncio
import gc

import pytest

from app.tasks import stop_task


async def test_a_task_that_swallows_a_cancellation_is_cancelled_until_it_is_done() -> None:
    swallowed = 0
    started = asyncio.Event()

    async def stubborn() -> None:
        nonlocal swallowed
        started.set()
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed == 3:
                    raise

    task = asyncio.create_task(stubborn())
    await started.wait()
    await asyncio.wait_for(stop_task(task), 10)
    assert task.cancelled() and swallowed == 3


async def test_a_failed_task_has_its_exception_retrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails() -> None:
        raise ValueError("boom")

    task = asyncio.create_task(fails())
    await asyncio.wait([task])
    await stop_task(task)
    assert task.done() and not task.cancelled()
    del task
    gc.collect()
    assert "exception was never retrieved" not in caplog.text


async def test_nothing_to_stop() -> None:
    await stop_task(None)
    done = asyncio.create_task(asyncio.sleep(0, "done"))
    await done
    await stop_task(done)
    assert done.result() == "done"
