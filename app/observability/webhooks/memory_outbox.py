"""The in-process webhook outbox (memory backend, one instance): lost with the process.

Bounded: beyond ``max_entries`` undelivered entries a new one is refused (``OutboxFull``, the
dispatcher counts it ``dropped``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from app.backends.due_queue import DueQueue
from app.backends.webhook_outbox import OutboxEntry, OutboxFull

__all__ = ["MemoryOutbox"]


class MemoryOutbox:
    def __init__(self, max_entries: int = 10000) -> None:
        self.max_entries = max_entries
        self._due: DueQueue[OutboxEntry] = DueQueue()
        self._count = 0
        self._empty = asyncio.Event()
        self._empty.set()

    async def start(self) -> None:
        return None

    async def put(self, entry: OutboxEntry) -> None:
        if self._count >= self.max_entries:
            raise OutboxFull(f"{self._count} webhooks wait already")
        self._count += 1
        self._empty.clear()
        self._due.push(entry)

    async def take(self) -> OutboxEntry:
        return await self._due.pop()

    async def later(self, entry: OutboxEntry, delay: float) -> None:
        self._due.push(entry, time.monotonic() + delay)

    async def done(self, entry: OutboxEntry) -> None:
        self._count -= 1
        if self._count == 0:
            self._empty.set()

    async def pending(self) -> int:
        return self._count

    async def drain(self, grace: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._empty.wait(), grace)

    async def close(self) -> None:
        return None
