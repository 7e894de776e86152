"""Keeping this instance's queue tickets alive: every ttl/3, one RENEW per conversation.

A renewal re-asserts a ticket that lapsed while Redis was unreachable (it is still ours unless
another instance adopted it meanwhile: then that one starts the run, and our claim says so).
At shutdown the tickets are disowned, not dropped: they lapse at once and a live instance
adopts them (:mod:`.adoption`), so a queued run outlives the instance that accepted it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.backends.redis.keys import ConversationKeys
from app.backends.redis.queue import RunQueue
from app.tasks import stop_task

__all__ = ["TicketKeeper"]

log = logging.getLogger(__name__)
#: How soon a failed renewal is retried (Redis unreachable).
RETRY_SECONDS = 0.2


class TicketKeeper:
    """The tickets of this instance, by conversation, and the loop that renews them."""

    def __init__(self, queue: RunQueue) -> None:
        self.queue = queue
        #: Tickets of this instance, by conversation: (keys, run ids).
        self.tickets: dict[str, tuple[ConversationKeys, set[str]]] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, keys: ConversationKeys, run_id: str) -> None:
        self.tickets.setdefault(keys.tag, (keys, set()))[1].add(run_id)

    def has(self, keys: ConversationKeys, run_id: str) -> bool:
        entry = self.tickets.get(keys.tag)
        return entry is not None and run_id in entry[1]

    def discard(self, keys: ConversationKeys, run_id: str) -> None:
        entry = self.tickets.get(keys.tag)
        if entry is not None:
            entry[1].discard(run_id)
            if not entry[1]:
                del self.tickets[keys.tag]

    def forget(self, keys: ConversationKeys) -> None:
        self.tickets.pop(keys.tag, None)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="redis-queue-tickets")

    async def stop(self) -> None:
        """Stop renewing and hand our tickets over (best effort: otherwise they lapse)."""
        task, self._task = self._task, None
        await stop_task(task)
        for keys, run_ids in list(self.tickets.values()):
            with contextlib.suppress(Exception):
                await self.queue.disown(keys, sorted(run_ids))
        self.tickets.clear()

    async def _loop(self) -> None:
        interval = self.queue.ttl_ms / 3000.0
        wait = interval
        while True:
            await asyncio.sleep(wait)
            wait = interval
            for keys, run_ids in list(self.tickets.values()):
                if not run_ids:
                    continue
                try:
                    await self.queue.renew(keys, sorted(run_ids))
                except Exception as exc:
                    # Redis down: retry soon, so a ticket that lapsed meanwhile is re-asserted
                    # as soon as Redis is back (before another instance would adopt it).
                    log.warning("queue ticket renewal failed for %s: %s", keys.tag, exc)
                    wait = min(interval, RETRY_SECONDS)
