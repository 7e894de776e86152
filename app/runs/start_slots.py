"""Run starts in progress at once on an instance: the rest wait their turn, first come first.

A start holds its slot from its acceptance until its ``run.started`` is logged (or it failed,
or was queued behind another run). Without it, a start storm's steps (limits, claim, meta, the
start events' append: dozens of Redis commands a start) queue on the loop between the deltas
of the answers already streaming. With a few starts at a time, the delivery latency of the
answers streaming during a start storm fell on Redis, capacity steps went over
their latency budget less often, and a burst of streamed starts on memory reached its first
deltas sooner for the same CPU (BENCHMARKS.md, "Costs behind the code's shortcuts").
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

__all__ = ["StartSlots", "Started"]


class Started(asyncio.Event):
    """A run's "it started" event that also calls back when set (the start's slot is given
    back then, with nobody awaiting it)."""

    def __init__(self) -> None:
        super().__init__()
        self._then: list[Callable[[], None]] = []

    def set(self) -> None:
        super().set()
        then, self._then = self._then, []
        for callback in then:
            callback()

    def then(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once this is set (now, if it is)."""
        if self.is_set():
            callback()
        else:
            self._then.append(callback)


class StartSlots:
    """``limit`` slots; :meth:`acquire` waits (FIFO) while all are held. Futures of the running
    loop, no loop bound at construction (unlike ``asyncio.Semaphore`` in 3.11's first use)."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.held = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for waiter in self._waiters if not waiter.done())

    async def acquire(self) -> None:
        if self.held < self.limit and not self._waiters:
            self.held += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # a release hands its slot over: ``held`` stays as it is
        except asyncio.CancelledError:
            if not waiter.cancelled():
                self.release()  # handed over, then cancelled: the next one gets it
            elif waiter in self._waiters:
                self._waiters.remove(waiter)  # gave up waiting
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # not one that gave up (it removes itself when it resumes)
                waiter.set_result(None)
                return
        self.held -= 1

    def release_when(self, started: Started, within: float) -> None:
        """Give the slot back once ``started`` is set, or after ``within`` seconds at most (a
        start that never logs ``run.started``, e.g. the backend unreachable, does not keep
        others waiting longer than the 202 itself waits)."""
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                timer.cancel()
                self.release()

        timer = asyncio.get_running_loop().call_later(within, release)
        started.then(release)
