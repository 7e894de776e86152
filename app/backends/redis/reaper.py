"""Ending runs whose owner was lost: take over under a new fencing token, close, release.

Whoever notices first does it: a log reader's tick, any read/claim/abort of the conversation,
or the periodic sweep of the ``P:runs`` index (which also finds runs nobody looks at). The
takeover script lets exactly one instance win. The ``lost_listeners`` (the run-end hooks of
``app/runs/ending.py``) are told as for a run ended by its owner: before the end is written (and
the slot released, in the same step) with the ended run's record, so its webhook is in the
outbox even if this instance dies next; after it is written, so the archive writes the end. A
run the dead owner had ended but not released is told too (its owner may have died before
enqueueing; the webhook's id is the same, so at worst a receiver sees one delivery twice).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from app.backends.redis.claims import Ownership, Token
from app.backends.redis.eventlog import KIND_EVENT, EventLog, Fenced, Pending
from app.backends.redis.keys import ConversationKeys, ref_of
from app.backends.redis.lost_run import lost_run_events
from app.backends.redis.state import StateCache
from app.backends.types import ConversationRef
from app.backends.webhook_outbox import LostRunListener
from core.kinds import TERMINAL_STATUSES

__all__ = ["Reaper"]

log = logging.getLogger("app.backends.redis")


class Reaper:
    def __init__(
        self,
        ownership: Ownership,
        log_: EventLog,
        cache: StateCache,
        prefix: str,
        owns: Callable[[str], bool],
    ) -> None:
        self.ownership = ownership
        self.log = log_
        self.cache = cache
        self.prefix = prefix
        self._owns = owns
        #: Awaited before the end is written (with the run's record) and after.
        self.lost_listeners: list[LostRunListener] = []

    async def reap(self, keys: ConversationKeys, holder: Token) -> bool:
        """End ``holder``'s run if its lease expired; True when this instance did it."""
        if holder.instance == self.ownership.instance_id and self._owns(keys.tag):
            return False  # ours and alive: the lease keeper renews it
        token = await self.ownership.takeover(keys, holder)
        if token is None:
            return False  # its owner is alive after all, or another instance got there first
        started = time.monotonic()
        async with self.cache.lock(keys.tag):
            inc, raw_ref, raw_meta = await self.ownership.redis.hmget(
                keys.meta, "inc", "ref", "meta"
            )
            events = []
            snapshot = None
            state = None
            told: ConversationRef | None = None
            if inc is not None:
                text = inc.decode() if isinstance(inc, bytes) else str(inc)
                state = await self.cache.load_private(keys, text)
                session_id = None if raw_meta is None else orjson.loads(raw_meta).get("sessionId")
                events = lost_run_events(
                    state.store.get_snapshot(), holder.run_id, session_id=session_id
                )
                for event in events:
                    state.store.dispatch(event)
            items = [Pending(KIND_EVENT, orjson.dumps(e), e["type"], e["runId"]) for e in events]
            if state is not None:
                snapshot = state.snapshot_write()
                run = state.store.get_snapshot().get("runs", {}).get(holder.run_id)
                told = await self._tell(ref_of(raw_ref), holder.run_id, run)
            try:
                ids = await self.log.append(keys, token.raw, items, release=True, snapshot=snapshot)
            except Fenced:
                return False
            if state is not None:
                if ids:
                    state.stream_id = ids[-1]
                self.cache.remember(keys.tag, state)
            await self.ownership.unmark(keys)
        log.warning(
            "run %s lost its owner %s; ended by %s (%d events, %.0f ms)",
            holder.run_id,
            holder.instance,
            self.ownership.instance_id,
            len(events),
            (time.monotonic() - started) * 1000,
        )
        if told is not None:
            await self._tell_ended(told, holder.run_id)
        return True

    async def _tell(
        self, ref: ConversationRef | None, run_id: str, run: dict[str, Any] | None
    ) -> ConversationRef | None:
        """Tell the listeners of the end about to be written; the conversation if they were."""
        if run is None or run.get("status") not in TERMINAL_STATUSES or not self.lost_listeners:
            return None
        if ref is None:  # created before conversations named themselves in their meta
            log.warning("run %s ended without its webhook: its conversation is unnamed", run_id)
            return None
        for listener in self.lost_listeners:
            try:
                await listener.run_lost(ref, run_id, run)
            except Exception:
                log.exception("a lost-run listener failed for run %s", run_id)
        return ref

    async def _tell_ended(self, ref: ConversationRef, run_id: str) -> None:
        for listener in self.lost_listeners:
            try:
                await listener.lost_run_ended(ref, run_id)
            except Exception:
                log.exception("a lost-run listener failed for run %s", run_id)

    async def sweep(self) -> None:
        """Check every run whose recorded lease deadline passed."""
        for tag in await self.ownership.lapsed(self.prefix):
            keys = ConversationKeys(self.prefix, tag)
            token, alive = await self.ownership.holder(keys)
            if token is None:
                await self.ownership.unmark(keys)
            elif not alive and not self._owns(tag):
                await self.reap(keys, token)
