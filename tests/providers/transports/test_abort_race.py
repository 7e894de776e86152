"""``race_stop``: the connect / request phase of an upstream call, stopped by abort or deadline.

It runs the call in the calling task (no task of its own): these hold the behaviour that the
separate task gave, a stop that raises the stop error at once, any other cancellation passing
through, and the task never left with a cancellation request pending.
"""

from __future__ import annotations

import asyncio

import pytest

from providers.errors import AbortError, UpstreamTimeout
from providers.signal import AbortSignal
from providers.transports._abort import Stopper, race_stop


async def test_the_call_runs_in_the_calling_task_and_returns_its_result() -> None:
    outer = asyncio.current_task()
    seen: list[asyncio.Task[object] | None] = []

    async def call() -> str:
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)
        return "response"

    stopper = Stopper(AbortSignal(), deadline_seconds=5)
    try:
        assert await race_stop(call(), stopper) == "response"
    finally:
        stopper.close()
    assert seen == [outer]
    assert outer is not None and outer.cancelling() == 0


async def test_an_abort_while_waiting_raises_the_abort_at_once() -> None:
    signal = AbortSignal()
    stopper = Stopper(signal, deadline_seconds=30)
    entered = asyncio.Event()
    never = asyncio.Event()

    async def call() -> None:
        entered.set()
        await never.wait()

    async def abort_when_entered() -> None:
        await entered.wait()
        signal.abort("interrupted")

    aborter = asyncio.create_task(abort_when_entered())
    try:
        with pytest.raises(AbortError) as caught:
            await asyncio.wait_for(race_stop(call(), stopper), 10)
    finally:
        stopper.close()
        await aborter
    assert caught.value.reason == "interrupted"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_the_deadline_raises_upstream_timeout() -> None:
    stopper = Stopper(AbortSignal(), deadline_seconds=0.01)
    try:
        with pytest.raises(UpstreamTimeout):
            await race_stop(asyncio.Event().wait(), stopper)
    finally:
        stopper.close()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_cancellation_the_stopper_did_not_cause_passes_through() -> None:
    stopper = Stopper(AbortSignal(), deadline_seconds=30)
    entered = asyncio.Event()

    async def call() -> None:
        entered.set()
        await asyncio.Event().wait()

    async def run() -> None:
        await race_stop(call(), stopper)

    task = asyncio.create_task(run())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not stopper.stopped
    stopper.close()


async def test_a_call_that_absorbs_the_stop_returns_and_leaves_no_cancellation_pending() -> None:
    signal = AbortSignal()
    stopper = Stopper(signal)
    entered = asyncio.Event()

    async def call() -> str:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "finished anyway"  # like a close that shields itself
        return "unreachable"

    async def abort_when_entered() -> None:
        await entered.wait()
        signal.abort()

    aborter = asyncio.create_task(abort_when_entered())
    try:
        assert await race_stop(call(), stopper) == "finished anyway"
    finally:
        stopper.close()
        await aborter
    assert stopper.stopped
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # no cancellation left to land on the next await


async def test_an_already_stopped_stopper_never_starts_the_call() -> None:
    signal = AbortSignal()
    signal.abort()
    stopper = Stopper(signal)
    started: list[bool] = []

    async def call() -> None:
        started.append(True)

    with pytest.raises(AbortError):
        await race_stop(call(), stopper)
    stopper.close()
    assert started == []
