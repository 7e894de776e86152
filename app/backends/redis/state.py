"""Conversation state outside the owner: snapshot + stream tail, cached and advanced.

An instance that never saw a conversation rebuilds it from the stored snapshot and the log
entries after the snapshot's cursor. Rebuilt states are cached (bounded, LRU) and advanced by
the tail on the next read, so a repeated ``GET …/state`` costs one ranged read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis

from app.backends.redis.eventlog import (
    KIND_EVENT,
    KIND_EXTENSION,
    ZERO_ID,
    Entry,
    EventLog,
    SnapshotWrite,
    parse_id,
)
from app.backends.redis.keys import ConversationKeys
from core import AgentStore

__all__ = ["ConversationState", "StateCache"]

log = logging.getLogger("app.backends.redis")
TAIL_PAGE = 1000


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(slots=True)
class ConversationState:
    """A conversation's reduced state at ``stream_id``, with its extensions."""

    inc: str
    store: AgentStore
    extensions: dict[str, Any]
    stream_id: str = ZERO_ID

    def fold(self, entries: list[Entry]) -> None:
        for entry in entries:
            if entry.kind == KIND_EVENT:
                self.store.dispatch(orjson.loads(entry.data))
            elif entry.kind == KIND_EXTENSION:
                item = orjson.loads(entry.data)
                self.extensions[item["key"]] = item["value"]
            self.stream_id = entry.id

    def snapshot_write(self) -> SnapshotWrite:
        return SnapshotWrite(
            orjson.dumps(self.store.get_snapshot()),
            orjson.dumps(self.extensions),
            self.stream_id,
        )


class StateCache:
    def __init__(self, redis: Redis, log_: EventLog, capacity: int = 1024) -> None:
        self.redis = redis
        self.log = log_
        self.capacity = capacity
        self._states: OrderedDict[str, ConversationState] = OrderedDict()
        self._locks: dict[str, list[Any]] = {}

    @contextlib.asynccontextmanager
    async def lock(self, tag: str) -> AsyncIterator[None]:
        """One state loader/writer per conversation in this process; dropped when unused."""
        entry = self._locks.get(tag)
        if entry is None:
            entry = self._locks[tag] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0 and self._locks.get(tag) is entry:
                del self._locks[tag]

    def remember(self, tag: str, state: ConversationState) -> None:
        self._states[tag] = state
        self._states.move_to_end(tag)
        while len(self._states) > self.capacity:
            self._states.popitem(last=False)

    def forget(self, tag: str) -> None:
        self._states.pop(tag, None)

    async def read_tail(self, keys: ConversationKeys, state: ConversationState) -> bool:
        """Fold every entry after ``state.stream_id``; False when the tail was trimmed."""
        while True:
            entries = await self.log.read_after(keys, state.stream_id, count=TAIL_PAGE)
            if entries is None:
                return False
            state.fold(entries)
            if len(entries) < TAIL_PAGE:
                return True

    async def load(self, keys: ConversationKeys, inc: str) -> ConversationState:
        """The cached state advanced by the tail, or the stored snapshot plus the tail.

        Call under :meth:`lock`. The result stays cached (and is advanced in place later).
        """
        cached = self._states.get(keys.tag)
        if cached is not None and cached.inc == inc and await self.read_tail(keys, cached):
            self._states.move_to_end(keys.tag)
            return cached
        state = await self._from_snapshot(keys, inc, await self.redis.hgetall(keys.snap))
        self.remember(keys.tag, state)
        return state

    async def _from_snapshot(
        self,
        keys: ConversationKeys,
        inc: str,
        snap: dict[Any, Any],
        log_read: list[Entry] | None = None,
    ) -> ConversationState:
        """The state of the stored snapshot ``snap`` (its hash; empty: none) plus the tail.
        ``log_read``: the log from its start, read after ``snap`` (``read_after`` of ``0-0``):
        when it is all of the log, the tail is taken from it instead of read again."""
        state = self._of_snapshot(inc, snap)
        if log_read is not None and len(log_read) < TAIL_PAGE:
            after = parse_id(state.stream_id)
            state.fold([entry for entry in log_read if parse_id(entry.id) > after])
            return state
        if not await self.read_tail(keys, state):
            log.warning(
                "conversation %s: snapshot older than the retained log; snapshot_every should "
                "be below event_log_max_len",
                keys.tag,
            )
            state.fold(await self.log.read_after(keys, ZERO_ID, count=10**9) or [])
        return state

    @staticmethod
    def _of_snapshot(inc: str, snap: dict[Any, Any]) -> ConversationState:
        """The stored snapshot ``snap`` (its hash; empty: none) as a state, no tail."""
        if snap:
            return ConversationState(
                inc,
                AgentStore(orjson.loads(snap[b"state"]), mode="record"),
                orjson.loads(snap.get(b"ext") or b"{}"),
                _text(snap[b"cursor"]),
            )
        return ConversationState(inc, AgentStore(mode="record"), {})

    async def load_private(
        self,
        keys: ConversationKeys,
        inc: str,
        snap: dict[Any, Any] | None = None,
        log_read: list[Entry] | None = None,
    ) -> ConversationState:
        """A fresh state that is not cached (for an owner, which advances it itself);
        ``snap``: the stored snapshot's hash when the caller already read it; ``log_read``:
        the log as read after it (see :meth:`_from_snapshot`)."""
        self.forget(keys.tag)
        if snap is None:
            snap = await self.redis.hgetall(keys.snap)
        return await self._from_snapshot(keys, inc, snap, log_read)
