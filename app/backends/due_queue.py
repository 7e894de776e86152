"""A local queue of items by due time (monotonic): ``pop`` waits until the earliest is due.

The webhook outboxes keep the entries this instance holds in one: a new entry is due at once,
a failed one again after its backoff. Several workers may wait on one queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from typing import Generic, TypeVar

__all__ = ["DueQueue"]

T = TypeVar("T")


class DueQueue(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, T]] = []
        self._order = itertools.count()
        #: Set (and replaced) on every push: a waiter captures the current one before it waits.
        self._pushed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, item: T, due: float | None = None) -> None:
        """``item`` is due at ``due`` (``time.monotonic()``; None: now)."""
        when = time.monotonic() if due is None else due
        heapq.heappush(self._heap, (when, next(self._order), item))
        self._pushed.set()
        self._pushed = asyncio.Event()

    async def pop(self) -> T:
        while True:
            now = time.monotonic()
            if self._heap and self._heap[0][0] <= now:
                return heapq.heappop(self._heap)[2]
            pushed = self._pushed
            wait = self._heap[0][0] - now if self._heap else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pushed.wait(), wait)
