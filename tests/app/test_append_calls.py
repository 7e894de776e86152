"""``app.append_calls.AppendCall``: a call is answered once, to its future or to its ``then``;
its arguments are built once, and made for a repeat send only when asked."""

from __future__ import annotations

import asyncio
from typing import Any

from app.append_calls import AppendCall, Args, fail


async def test_a_reply_settles_the_future_and_an_error_reply_is_raised_to_its_caller() -> None:
    loop = asyncio.get_running_loop()
    ok = AppendCall(["k"], ["a"], loop.create_future())
    fenced = AppendCall(["k"], ["a"], loop.create_future())
    ok.answer(b"1-0")
    fenced.answer(RuntimeError("FENCED"))
    assert ok.done is not None and await ok.done == b"1-0"
    assert fenced.done is not None and isinstance(fenced.done.exception(), RuntimeError)


async def test_a_future_its_caller_gave_up_on_is_left_alone_and_not_live() -> None:
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    call = AppendCall(["k"], ["a"], done)
    assert call.live()
    done.cancel()
    assert not call.live()
    call.answer(b"1-0")  # no InvalidStateError
    call.withdraw()
    assert done.cancelled()


async def test_then_is_told_once_and_a_then_that_raises_goes_to_the_loops_handler() -> None:
    told: list[Any] = []
    call = AppendCall(["k"], ["a"], None, then=told.append)
    assert call.live()  # nothing awaits it: wanted until answered
    call.answer(b"1-0")
    call.answer(b"2-0")
    call.withdraw()
    assert told == [b"1-0"]

    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:

        def raises(_reply: Any) -> None:
            raise ValueError("boom")

        AppendCall(["k"], ["a"], None, then=raises).answer(b"1-0")
    finally:
        loop.set_exception_handler(None)
    assert [type(c["exception"]) for c in reported] == [ValueError]


async def test_a_withdrawn_call_cancels_its_future_or_tells_then_cancelled() -> None:
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    AppendCall(["k"], ["a"], done).withdraw()
    assert done.cancelled()
    told: list[Any] = []
    AppendCall(["k"], ["a"], None, then=told.append).withdraw()
    assert len(told) == 1 and isinstance(told[0], asyncio.CancelledError)


def test_arguments_are_built_once_and_made_for_a_repeat_only_when_asked() -> None:
    built: list[int] = []

    def build() -> Args:
        built.append(1)
        return ["x", 1]

    def again(args: Args) -> Args:
        return [*args, "again"]

    call = AppendCall(["k"], build, None, again)
    assert call.packed_args() == ["x", 1]
    assert call.packed_args(again=True) == ["x", 1, "again"]
    assert built == [1]
    assert AppendCall(["k"], ["x"], None).packed_args(again=True) == ["x"]  # no `again`: as is


async def test_fail_answers_every_call_with_the_error() -> None:
    loop = asyncio.get_running_loop()
    told: list[Any] = []
    calls = [
        AppendCall(["k"], ["a"], loop.create_future()),
        AppendCall(["k"], ["a"], None, then=told.append),
    ]
    error = ConnectionError("lost")
    fail(calls, error)
    assert calls[0].done is not None and calls[0].done.exception() is error
    assert told == [error]
