"""Appends on Redis: reduce the event into the state, then write it to the stream, fenced.

During a run of ours, the owner's live state takes the event and its fenced writer logs it
(:class:`.owned_run.OwnedRun`). Outside one (no run may be active), the append is fenced by the
empty token and the state is loaded from snapshot + log tail under the conversation's lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from redis.exceptions import RedisError

from app.backends.redis.errors import RunFenced, unavailable, unavailable_error
from app.backends.redis.eventlog import (
    KIND_EVENT,
    KIND_EXTENSION,
    ZERO_ID,
    Entry,
    Fenced,
    Pending,
    SnapshotWrite,
)
from app.backends.redis.instance import text
from app.backends.redis.keys import ConversationKeys
from app.backends.redis.owned_run import OwnedRun
from app.backends.redis.role import RedisRole
from app.backends.redis.state import ConversationState
from app.backends.roles import EventAppender
from app.backends.types import AppendDone, ConversationRef, LogEntry, LogItem

__all__ = ["RedisAppends"]

log = logging.getLogger("app.backends.redis")
Fold = Callable[[ConversationState], None]
_new_entry = object.__new__


def _logged(
    inc: str, ids: list[str], items: list[Pending]
) -> tuple[list[Entry], list[LogEntry], list[tuple[int, int]]]:
    """The entries just appended (their LogEntries cached on them for incarnation ``inc``),
    the LogEntries, and the entries' stream positions, in one pass per logged event. Cursors
    are ``make_cursor``'s (an appended id is never ``0-0``). One pass instead of four (entry,
    LogEntry, cursor, position) takes a measurable share off the gateway's CPU per event on a
    Redis stream (BENCHMARKS.md, "Costs behind the code's shortcuts")."""
    prefix = inc.encode() + b"."
    of_logged = LogEntry.of_logged
    stored: list[Entry] = []
    made: list[LogEntry] = []
    positions: list[tuple[int, int]] = []
    for sid, (kind, data, type_, run_id) in zip(ids, items, strict=True):
        entry = _new_entry(Entry)  # Entry's fields set here: no __init__ frame per event
        entry.id, entry.kind, entry.data, entry.type, entry.run_id = sid, kind, data, type_, run_id
        entry.cache = log_entry = of_logged(
            prefix + sid.encode(),
            "event" if kind == KIND_EVENT else "extension",
            data,
            type_ or None,
            run_id or None,
        )
        entry.inc = inc
        stored.append(entry)
        made.append(log_entry)
        ms, _, seq = sid.partition("-")
        positions.append((int(ms), int(seq or 0)))
    return stored, made, positions


def _fold(state: ConversationState, items: Sequence[LogItem]) -> None:
    for item in items:
        if item.event is not None:
            # An event the runner checked (protocol.md §6) is not validated twice.
            state.store.dispatch(item.event, validated=item.checked)
        else:
            state.extensions[item.key] = item.value


class RedisAppends(RedisRole, EventAppender):
    inline_appends = True
    appends_wait = True

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
            _fold(state, items)

        i = self._i
        keys = i.keys(ref)
        with unavailable():
            # In this frame, not one more per append: a run's every append passes through each
            # frame of the chain that awaits it, once to send and once for the reply.
            owned = i.owned.get(keys.tag)
            if owned is None or owned.fenced or owned.dirty:
                owned = await i.live_owned(keys)  # raises when fenced; reloads when dirty
                if owned is None:
                    return await self._free_append(keys, pending, fold)
            fold(owned.state)
            prev = owned.state.stream_id
            ids, snapshotted = await owned.append(pending, i.snapshot_every, i.log.max_len)
            if owned.writer.retried != owned.retries_checked:
                await self._check_after_retry(keys, owned, prev)
            if owned.writer.broken != owned.broken_checked:
                await self._new_epoch(keys, owned)
            return self._landed(keys, owned.state, prev, ids, pending, snapshotted)

    async def _check_after_retry(self, keys: ConversationKeys, owned: OwnedRun, prev: str) -> None:
        """An append of ``owned`` landed after Redis was unreachable. A Redis restarted from
        an AOF that missed its last writes lost the newest entries: if the log no longer holds
        ``prev`` (what the state was at), the state holds events the log lost, and is rebuilt
        from the log before the next append (and the release's snapshot); the local reader
        forgets them too. Not sure (Redis failed again): rebuilt all the same."""
        owned.retries_checked = owned.writer.retried
        i = self._i
        try:
            if prev == ZERO_ID or await i.redis.xrange(keys.log, min=prev, max=prev, count=1):
                return
            log.warning("conversation %s: Redis lost the log's entries up to %s", keys.tag, prev)
            reader = i.hub.readers.get(keys.tag)
            if reader is not None:
                await reader.verify()
        except (RedisError, OSError):
            pass
        owned.dirty = True

    async def _new_epoch(self, keys: ConversationKeys, owned: OwnedRun) -> None:
        """An append of ``owned`` did not follow the owner's previous one: the log lost
        entries the owner had logged (a failover's promoted replica lacked them), and the new
        ones may carry their ids. The append script gave the conversation's incarnation a new
        epoch: the owner's cursors take it, its state is rebuilt from the log before the next
        append, and the local reader reads the log again under it."""
        owned.broken_checked = owned.writer.broken
        owned.dirty = True
        inc = await self._i.redis.hget(keys.meta, "inc")
        if inc is None:
            return  # deleted meanwhile: the next append is fenced
        owned.state.inc = text(inc)
        log.warning("conversation %s: the log lost entries; new epoch %s", keys.tag, text(inc))
        reader = self._i.hub.readers.get(keys.tag)
        if reader is not None:
            reader.restart(owned.state.inc)

    def _landed(
        self,
        keys: ConversationKeys,
        state: ConversationState,
        prev: str,
        ids: list[str],
        pending: list[Pending],
        snapshotted: bool,
    ) -> list[LogEntry]:
        """An owner's append landed after ``prev``: its entries, handed to the local
        subscribers (no ``XREAD``); a snapshot written with it renews the keys' TTL."""
        i = self._i
        if snapshotted and i.ttl_ms is not None:
            i.spawn(i.touch_quietly(keys))
        inc = state.inc
        stored, out, positions = _logged(inc, ids, pending)
        reader = i.hub.readers.get(keys.tag)
        if reader is not None:
            reader.feed(prev, stored, positions, (inc, out))
        return out

    def append_soon(self, ref: ConversationRef, items: Sequence[LogItem], done: AppendDone) -> bool:
        """:meth:`append_batch` of a run this instance owns, not waited for, when its writer
        is idle (else False, nothing done: the caller awaits ``append_batch``).

        The runner goes back to its upstream, and the reply's callback does what the append's
        caller did after its round trip (the stream id, the local subscribers' feed). At
        C = 200 slow answers on Redis (one delta per append) this is the runner's wake-up
        per delta, and the eight frames it resumed, gone."""
        i = self._i
        keys = i.keys(ref)
        owned = i.owned.get(keys.tag)
        if not items or owned is None or owned.fenced or owned.dirty or not owned.writer.idle():
            return False
        pending = [_pending(item) for item in items]
        state = owned.state
        _fold(state, items)
        prev = state.stream_id
        snap = owned.snapshot_due(len(pending), i.snapshot_every, i.log.max_len)
        owned.appending += 1

        def settled(ids: list[str] | None, error: Exception | None) -> None:
            owned.appending -= 1
            if ids is None:
                assert error is not None
                failure = owned.failed(error)
                if failure is error:
                    failure = unavailable_error(error)  # as ``unavailable()`` maps it
                done(None, failure)
                return
            writer = owned.writer
            if ids and (
                writer.retried != owned.retries_checked or writer.broken != owned.broken_checked
            ):
                state.stream_id = ids[-1]
                i.spawn(self._landed_after_retry(keys, owned, prev, ids, pending, snap, done))
                return
            try:
                if ids:
                    state.stream_id = ids[-1]
                out = self._landed(keys, state, prev, ids, pending, snap is not None)
            except Exception as exc:  # told, as append_batch would raise it: never left waiting
                done(None, exc)
                return
            done(out, None)

        owned.writer.append_soon(pending, snap, settled)
        return True

    async def _landed_after_retry(
        self,
        keys: ConversationKeys,
        owned: OwnedRun,
        prev: str,
        ids: list[str],
        pending: list[Pending],
        snap: SnapshotWrite | None,
        done: AppendDone,
    ) -> None:
        """An :meth:`append_soon` that landed on a retry, or not after the owner's previous
        one: checked as :meth:`append_batch` checks one, then handed on."""
        try:
            if owned.writer.retried != owned.retries_checked:
                await self._check_after_retry(keys, owned, prev)
            if owned.writer.broken != owned.broken_checked:
                await self._new_epoch(keys, owned)
            out = self._landed(keys, owned.state, prev, ids, pending, snap is not None)
        except asyncio.CancelledError:  # shutting down: told, never left waiting
            done(None, unavailable_error(RedisError("the append's check was cancelled")))
            raise
        except Exception as exc:  # told, never left waiting
            done(None, exc)
            return
        done(out, None)

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
            return _logged(state.inc, ids, items)[1]


#: ``Pending`` built by ``tuple.__new__``, not the named tuple's Python ``__new__``: one per
#: logged event, cheaper (BENCHMARKS.md, "Costs behind the code's shortcuts").
_new_tuple = tuple.__new__


def _pending(item: LogItem) -> Pending:
    # The JSON is copied by ``%`` to a right-sized allocation: ``orjson.dumps`` answers on a
    # >= 4 KiB buffer, and the entry (its ``data``) stays in the conversation's reader window
    # (up to 1,024 entries). Kept as it was, each event took a fresh page and a capacity step
    # grew the gateway's RSS by hundreds of MB (BENCHMARKS.md, "Costs behind the code's shortcuts").
    if item.event is not None:
        event = item.event
        data = b"%s" % orjson.dumps(event)
        return _new_tuple(
            Pending, (KIND_EVENT, data, str(event.get("type", "")), str(event.get("runId", "")))
        )
    return Pending(KIND_EXTENSION, b"%s" % orjson.dumps({"key": item.key, "value": item.value}))
