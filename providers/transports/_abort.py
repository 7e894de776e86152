"""Stopping an upstream call at once: on abort (the run's signal) or at the request deadline.

A :class:`Stopper` merges the two causes; transports register "close now" callbacks on it that
tear the connection down synchronously (so a blocked read wakes up), and :func:`race_stop` runs
the connect / handshake phase so that it is cancelled the moment the stopper fires.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from providers.errors import AbortError, UpstreamTimeout
from providers.signal import AbortSignal

T = TypeVar("T")
StopCause = Literal["abort", "deadline"]


def _nothing() -> None:
    return None


class Stopper:
    __slots__ = ("_callbacks", "_remove_signal", "_timer", "cause", "signal")

    def __init__(self, signal: AbortSignal, deadline_seconds: float | None = None) -> None:
        self.signal = signal
        self.cause: StopCause | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._remove_signal = signal.add_callback(lambda _reason: self.stop("abort"))
        if deadline_seconds is not None and self.cause is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(deadline_seconds, self.stop, "deadline")

    @property
    def stopped(self) -> bool:
        return self.cause is not None

    def stop(self, cause: StopCause) -> None:
        if self.cause is not None:
            return
        self.cause = cause
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                pass

    def on_stop(self, callback: Callable[[], None]) -> Callable[[], None]:
        if self.cause is not None:
            callback()
            return lambda: None
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    def error(self) -> BaseException:
        if self.cause == "deadline":
            return UpstreamTimeout()
        return AbortError.from_signal(self.signal)

    def check(self) -> None:
        if self.cause is not None:
            raise self.error()

    def close(self) -> None:
        # The remover's closure holds the callback that holds this stopper: drop it, or the
        # stopper (and the run it belongs to) lives until a full collection.
        remove, self._remove_signal = self._remove_signal, _nothing
        remove()
        if self._timer is not None:
            self._timer.cancel()
        self._callbacks.clear()


async def race_stop(coro: Coroutine[Any, Any, T], stopper: Stopper) -> T:
    """Await ``coro``; if ``stopper`` fires first, cancel it and raise the stop error.

    ``coro`` runs in the calling task, which the stopper cancels (as ``wait_within`` does): no
    task of its own, so the upstream request of a run start is sent without a task switch.
    """
    if stopper.stopped:
        coro.close()
        raise stopper.error()
    task = asyncio.current_task()
    assert task is not None
    stopped = False

    def cancel() -> None:
        nonlocal stopped
        stopped = True
        task.cancel()

    remove = stopper.on_stop(cancel)
    try:
        result = await coro
    except asyncio.CancelledError:
        if stopped and task.uncancel() == 0:
            raise stopper.error() from None
        raise
    finally:
        remove()
    if stopped:  # ``coro`` absorbed the cancellation: withdraw it (the caller sees the stopper)
        task.uncancel()
    return result
