"""Appends on Redis: reduce the event into the state, then write it to the stream, fenced.

During a run of ours, the owner's live state takes the event and its fenced writer logs it
(:class:`.owned_run.OwnedRun`). Outside one (no run may be active), the append is fenced by the
empty token and the state is loaded from snapshot + log tail under the conversation's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from app.backends.redis.errors import RunFenced, unavailable
from app.backends.redis.eventlog import KIND_EVENT, KIND_EXTENSION, Entry, Fenced, Pending
from app.backends.redis.instance import RedisInstance, text
from app.backends.redis.keys import ConversationKeys
from app.backends.redis.state import ConversationState
from app.backends.roles import EventAppender
from app.backends.types import ConversationRef, LogEntry, LogItem

__all__ = ["RedisAppends"]

Fold = Callable[[ConversationState], None]


def _stored(stream_id: str, item: Pending) -> Entry:
    return Entry(stream_id, item.kind, item.data, item.type, item.run_id)


class RedisAppends(EventAppender):
    def __init__(self, instance: RedisInstance) -> None:
        self._i = instance

    async def append_event(self, ref: ConversationRef, event: dict[str, Any]) -> LogEntry:
        (entry,) = await self.append_batch(ref, [LogItem.of_event(event)])
        return entry

    async def append_extension(self, ref: ConversationRef, key: str, value: Any) -> LogEntry:
        (entry,) = await self.append_batch(ref, [LogItem.of_extension(key, value)])
        return entry

    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        if not items:
            return []
        pending = [_pending(item) for item in items]

        def fold(state: ConversationState) -> None:
            for item in items:
                if item.event is not None:
                    # An event the runner checked (protocol.md §6) is not validated twice.
                    state.store.dispatch(item.event, validated=item.checked)
                else:
                    state.extensions[item.key] = item.value

        with unavailable():
            return await self._append(self._i.keys(ref), pending, fold)

    async def _append(
        self, keys: ConversationKeys, items: list[Pending], fold: Fold
    ) -> list[LogEntry]:
        i = self._i
        owned = await i.live_owned(keys)
        if owned is None:
            return await self._free_append(keys, items, fold)
        fold(owned.state)
        prev = owned.state.stream_id
        ids, snapshotted = await owned.append(items, i.snapshot_every, i.log.max_len)
        if snapshotted and i.ttl_ms is not None:
            i.spawn(i.touch_quietly(keys))
        inc = owned.state.inc
        stored = [_stored(sid, item) for sid, item in zip(ids, items, strict=True)]
        out = [i.log_entry(inc, entry) for entry in stored]
        reader = i.hub.readers.get(keys.tag)
        if reader is not None:
            reader.feed(prev, stored)  # local subscribers get these frames, no XREAD
        return out

    async def _free_append(
        self, keys: ConversationKeys, items: list[Pending], fold: Fold
    ) -> list[LogEntry]:
        """Append outside a run of ours (no run may be active): fenced by the empty token."""
        i = self._i
        async with i.states.lock(keys.tag):
            inc = await i.redis.hget(keys.meta, "inc")
            if inc is None:
                raise KeyError(f"conversation {keys.tag} does not exist")
            state = await i.states.load(keys, text(inc))
            fold(state)
            try:
                ids = await i.log.append(keys, "", items, snapshot=state.snapshot_write())
            except Fenced:
                i.states.forget(keys.tag)
                raise RunFenced("another instance owns the active run") from None
            except BaseException:
                i.states.forget(keys.tag)
                raise
            state.stream_id = ids[-1]
            return [
                i.log_entry(state.inc, _stored(sid, item))
                for sid, item in zip(ids, items, strict=True)
            ]


#: ``Pending`` built by ``tuple.__new__``, not the named tuple's Python ``__new__``: one per
#: logged event, 0.15 against 0.32 µs.
_new_tuple = tuple.__new__


def _pending(item: LogItem) -> Pending:
    if item.event is not None:
        event = item.event
        data = orjson.dumps(event)
        return _new_tuple(
            Pending, (KIND_EVENT, data, str(event.get("type", "")), str(event.get("runId", "")))
        )
    return Pending(KIND_EXTENSION, orjson.dumps({"key": item.key, "value": item.value}))
