"""Enqueued runs on Redis: a cluster-wide FIFO of tickets that orders the run slot's claims.

Each ticket is stored with its run's request, so the run outlives the instance that accepted
it (:mod:`.adoption`). This instance renews the tickets of its queued runs
(:class:`.tickets.TicketKeeper`); a ticket removed elsewhere (an abort, a delete) or adopted by
another instance is remembered so the run is known as not ours to start.
"""

from __future__ import annotations

import contextlib

from redis.exceptions import RedisError

from app.backends.redis.adoption import encode_request
from app.backends.redis.claims import Token
from app.backends.redis.errors import unavailable
from app.backends.redis.idempotency import remembered
from app.backends.redis.role import RedisRole
from app.backends.roles import QueuedRuns
from app.backends.types import AcceptedAnswer, ConversationRef, QueuedRun, RunAdopter

__all__ = ["RedisQueuedRuns"]


class RedisQueuedRuns(RedisRole, QueuedRuns):
    async def enqueue_run(
        self,
        ref: ConversationRef,
        run: QueuedRun,
        *,
        limit: int | None,
        interrupt: bool = False,
        answer: AcceptedAnswer | None = None,
    ) -> bool:
        keys = self._i.keys(ref)
        request = encode_request(ref, run)
        remember = remembered(keys, answer)
        # Indexed before the ticket exists (the index is another key, on a cluster another
        # slot): an instance killed right after the ticket landed leaves it where a live
        # instance's sweep finds it. An entry without a ticket is dropped by the next sweep.
        with contextlib.suppress(RedisError, OSError):  # else the first renewal marks it
            await self._i.queue.mark(keys)
        with unavailable():
            queued = await self._i.queue.enqueue(
                keys, run.run_id, request, limit, interrupt, remember
            )
        if queued:
            self._i.tickets.add(keys, run.run_id)
        return queued

    async def drop_run(self, ref: ConversationRef, run_id: str) -> bool:
        keys = self._i.keys(ref)
        self._i.tickets.discard(keys, run_id)  # no longer renewed: it lapses if Redis is down
        with unavailable():
            dropped = await self._i.queue.drop(keys, run_id)
        if dropped:  # the run after it may be first now
            await self._i.slot_freed(keys)
        return dropped

    def run_dropped(self, ref: ConversationRef, run_id: str) -> bool:
        item = (self._i.keys(ref).tag, run_id)
        if item in self._i.dropped:
            self._i.dropped.discard(item)
            return True
        return False

    async def queued_runs(self, ref: ConversationRef) -> int:
        with unavailable():
            return await self._i.queue.count(self._i.keys(ref))

    def on_adopted_runs(self, adopter: RunAdopter) -> None:
        self._i.adoption.adopter = adopter

    async def is_queued(self, ref: ConversationRef, run_id: str) -> bool:
        """Waiting with its ticket (live, or lapsed with its request: it will be adopted), or
        holding the slot under a live lease before it logged its start."""
        with unavailable():
            ticket, holder, leased = await self._i.queue.queued(self._i.keys(ref), run_id)
        return ticket or (leased and bool(holder) and Token(holder).run_id == run_id)
