"""Appends on Redis: reduce the event into the state, then write it to the stream, fenced.

During a run of ours, the owner's live state takes the event and its fenced writer logs it
(:class:`.owned_run.OwnedRun`). Outside one (no run may be active), the append is fenced by the
empty token and the state is loaded from snapshot + log tail under the conversation's lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from app.backends.redis.errors import RunFenced, unavailable
from app.backends.redis.eventlog import KIND_EVENT, KIND_EXTENSION, Entry, Fenced, Pending
from app.backends.redis.instance import RedisInstance, text
from app.backends.redis.keys import ConversationKeys
from app.backends.redis.state import ConversationState
from app.backends.roles import EventAppender
from app.backends.types import ConversationRef, LogEntry

__all__ = ["RedisAppends"]

Fold = Callable[[ConversationState], None]


def _stored(stream_id: str, item: Pending) -> Entry:
    return Entry(stream_id, item.kind, item.data, item.type, item.run_id)


class RedisAppends(EventAppender):
    def __init__(self, instance: RedisInstance) -> None:
        self._i = instance

    async def append_event(self, ref: ConversationRef, event: dict[str, Any]) -> LogEntry:
        type_, run_id = str(event.get("type", "")), str(event.get("runId", ""))
        item = Pending(KIND_EVENT, orjson.dumps(event), type_, run_id)

        def fold(state: ConversationState) -> None:
            state.store.dispatch(event)

        with unavailable():
            return await self._append(self._i.keys(ref), item, fold)

    async def append_extension(self, ref: ConversationRef, key: str, value: Any) -> LogEntry:
        item = Pending(KIND_EXTENSION, orjson.dumps({"key": key, "value": value}))

        def fold(state: ConversationState) -> None:
            state.extensions[key] = value

        with unavailable():
            return await self._append(self._i.keys(ref), item, fold)

    async def _append(self, keys: ConversationKeys, item: Pending, fold: Fold) -> LogEntry:
        i = self._i
        owned = await i.live_owned(keys)
        if owned is None:
            return await self._free_append(keys, item, fold)
        fold(owned.state)
        stream_id, snapshotted = await owned.append(item, i.snapshot_every)
        if snapshotted and i.ttl_ms is not None:
            i.spawn(i.touch_quietly(keys))
        return i.log_entry(owned.state.inc, _stored(stream_id, item))

    async def _free_append(self, keys: ConversationKeys, item: Pending, fold: Fold) -> LogEntry:
        """Append outside a run of ours (no run may be active): fenced by the empty token."""
        i = self._i
        async with i.states.lock(keys.tag):
            inc = await i.redis.hget(keys.meta, "inc")
            if inc is None:
                raise KeyError(f"conversation {keys.tag} does not exist")
            state = await i.states.load(keys, text(inc))
            fold(state)
            try:
                ids = await i.log.append(keys, "", [item], snapshot=state.snapshot_write())
            except Fenced:
                i.states.forget(keys.tag)
                raise RunFenced("another instance owns the active run") from None
            except BaseException:
                i.states.forget(keys.tag)
                raise
            state.stream_id = ids[0]
            return i.log_entry(state.inc, _stored(ids[0], item))
