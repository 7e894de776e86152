"""The retention task: every ``interval`` s, drop conversations idle longer than ``days``.

Safe with several instances: each deletion is conditional on the row still being idle, so two
instances doing it at once delete each conversation once and a conversation written meanwhile
stays. Tombstones of deleted conversations are dropped after ``TOMBSTONE_DAYS``.
"""

from __future__ import annotations

import asyncio
import logging
import time

from app.archive.store import ArchiveStore
from app.archive.writer import describe_error

__all__ = ["TOMBSTONE_DAYS", "RetentionTask"]

logger = logging.getLogger("app.archive")
TOMBSTONE_DAYS = 30.0
_DAY_MS = 86_400_000.0


class RetentionTask:
    def __init__(self, store: ArchiveStore, days: float, interval: float) -> None:
        self._store = store
        self._days = days
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> int:
        """One pass; how many conversations were dropped."""
        now = time.time() * 1000
        dropped = 0
        if self._days > 0:
            cutoff = now - self._days * _DAY_MS
            while True:
                batch = await self._store.drop_idle(cutoff)
                dropped += batch
                if batch == 0:
                    break
        await self._store.drop_tombstones(now - max(TOMBSTONE_DAYS, self._days) * _DAY_MS)
        if dropped:
            logger.info("archive retention: dropped %d idle conversation(s)", dropped)
        return dropped

    async def _forever(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception as exc:
                logger.warning("archive retention failed: %s", describe_error(exc))
            await asyncio.sleep(self._interval)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._forever(), name="archive-retention")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
