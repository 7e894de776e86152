"""Reads on Redis: from a cursor, through the instance's one log reader per conversation.

A read is served from the reader's window when it can (:mod:`.fanout`), else from the stream;
a cursor of another incarnation reads as ``unknown``, one behind retention as ``trimmed``.
With hundreds of local subscribers a read costs no Redis call and no per-entry work: the
window's LogEntries are built once per instance and a read hands out a slice of them.
"""

from __future__ import annotations

import asyncio

from app.backends.redis.cursors import make_cursor, parse_cursor
from app.backends.redis.errors import unavailable
from app.backends.redis.eventlog import parse_id
from app.backends.redis.fanout import LogReader, SinkWait
from app.backends.redis.instance import text
from app.backends.redis.keys import ConversationKeys
from app.backends.redis.role import RedisRole
from app.backends.roles import EventReader
from app.backends.types import EMPTY_CURSOR, ConversationRef, ReadResult, ReadSink

__all__ = ["RedisReads"]


def _retrieve(lookup: asyncio.Future[str | None]) -> None:
    """Mark a shared lookup's failure as seen (its waiters get it; none may be left)."""
    if not lookup.cancelled():
        lookup.exception()


class RedisReads(RedisRole, EventReader):
    async def head_cursor(self, ref: ConversationRef) -> str:
        keys = self._i.keys(ref)
        with unavailable():
            async with self._i.redis.pipeline(transaction=False) as pipe:
                pipe.hget(keys.meta, "inc")
                pipe.xrevrange(keys.log, count=1)
                inc, last = await pipe.execute()
        if inc is None or not last:
            return EMPTY_CURSOR
        return make_cursor(text(inc), text(last[0][0]))

    async def read(
        self,
        ref: ConversationRef,
        after: str,
        *,
        limit: int,
        wait: float,
        sink: ReadSink | None = None,
    ) -> ReadResult:
        hub = self._i.hub
        keys = self._i.keys(ref)
        with unavailable():
            reader = hub.acquire_nowait(keys) or await hub.acquire(keys)
            try:
                seen = reader.version
                result = await self._read_once(reader, keys, after, limit)
                if result.entries or result.status != "ok" or wait <= 0:
                    return result
                # One wait, like the memory backend: new entries, a reset (delete) or
                # wake_readers() (shutdown) end it, also one since ``seen``; the caller loops.
                sinking = None if sink is None else self._sink_wait(reader, after, sink)
                await reader.wait(seen, wait, sinking)
                if sinking is not None and sinking.last is not None:
                    after = sinking.last.cursor  # past what the sink took
                return await self._read_once(reader, keys, after, limit)
            finally:
                hub.release(reader)

    def _sink_wait(self, reader: LogReader, after: str, sink: ReadSink) -> SinkWait | None:
        """A sink for a read at the head of ``reader``'s window (the entries the local writer
        feeds next follow on from it), else None: that read is woken, as without a sink."""
        parsed = parse_cursor(after)
        inc = reader.inc
        if parsed is None or not reader.inc_known or inc is None or parsed[0] != inc:
            return None
        position = parse_id(parsed[1])
        if position != reader.last_pos:
            return None
        log_entry = self._i.log_entry
        return SinkWait(position, sink, inc, lambda e: log_entry(inc, e))

    def wake_readers(self) -> None:
        for reader in list(self._i.hub.readers.values()):
            reader.wake()

    async def _incarnation(
        self, reader: LogReader, keys: ConversationKeys, *, fresh: bool = False
    ) -> str | None:
        """The conversation's incarnation: the reader's, else looked up in Redis.

        Concurrent lookups share one ``HGET`` (hundreds of followers waiting for a conversation
        to be created all wake when its run starts) unless ``fresh``: an answer that ends a
        stream (``unknown``) is always from a lookup started after the caller asked.
        """
        if reader.inc_known and not fresh:
            return reader.inc
        lookup = reader.inc_lookup
        if fresh or lookup is None or lookup.done():
            lookup = reader.inc_lookup = asyncio.ensure_future(self._lookup(reader, keys))
            lookup.add_done_callback(_retrieve)
        return await asyncio.shield(lookup)

    async def _lookup(self, reader: LogReader, keys: ConversationKeys) -> str | None:
        raw = await self._i.redis.hget(keys.meta, "inc")
        inc = None if raw is None else text(raw)
        if inc is not None and reader.inc is not None and inc != reader.inc:
            reader.learn(inc)  # a new epoch (the window may hold lost entries) or incarnation
        reader.inc = inc
        reader.inc_known = True
        return reader.inc

    async def _read_once(
        self, reader: LogReader, keys: ConversationKeys, after: str, limit: int
    ) -> ReadResult:
        parsed = parse_cursor(after)
        if parsed is None:
            return ReadResult("unknown")
        want_inc, sid = parsed
        if not reader.inc_known:
            inc = await self._incarnation(reader, keys)
        elif reader.inc is None:  # known as not created: it may have been since
            reader.inc_known = False
            inc = await self._incarnation(reader, keys)
        else:
            inc = reader.inc
        if want_inc is not None and want_inc != inc:
            reader.inc_known = False  # maybe re-created since: look again
            inc = await self._incarnation(reader, keys, fresh=True)
            if want_inc != inc:
                return ReadResult("unknown")
        if inc is None:
            return ReadResult("ok" if want_inc is None else "unknown")
        position = parse_id(sid)
        if reader.lost and reader.is_lost(position):
            return ReadResult("trimmed")  # Redis lost it: no longer in the log
        if position > reader.last_pos:
            if position > parse_id(await self._i.log.last_id(keys)):
                return ReadResult("unknown")  # not a position of this log
            return ReadResult("ok")  # the reader will get there
        log_entry = self._i.log_entry
        window = reader.window_view(position, limit, inc, lambda e: log_entry(inc, e))
        if window is not None:
            return ReadResult("ok", window)
        got = await reader.older(sid, limit)
        if got is None:
            return ReadResult("trimmed")
        return ReadResult("ok", [log_entry(inc, e) for e in got])
