"""The instance's log reader of a conversation (``app.backends.redis.fanout``) on a real Redis:
what its run writer feeds while the reader is still reading its starting position is kept, and
the window never holds an entry twice."""

from __future__ import annotations

import asyncio
import gc

import orjson
from redis.asyncio import Redis

from app.backends.redis.eventlog import KIND_EVENT, Entry, EventLog, Pending, parse_id
from app.backends.redis.fanout import LogReader
from app.backends.redis.keys import ConversationKeys
from app.backends.types import LogEntry
from tests.app.support.redis_support import prefix, redis
from tests.support import eventually

__all__ = ["prefix", "redis"]  # fixtures


class SlowStart(EventLog):
    """Answers the reader's starting position only when ``answer`` is set, with the position
    it read before (a read sent before the run's first append lands answers "empty")."""

    def __init__(self, redis: Redis) -> None:
        super().__init__(redis, max_len=100)
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    async def last_id(self, keys: ConversationKeys) -> str:
        before = await super().last_id(keys)
        self.asked.set()
        await self.answer.wait()
        return before


async def _append(log: EventLog, keys: ConversationKeys, ns: list[int]) -> list[Entry]:
    items = [Pending(KIND_EVENT, orjson.dumps({"n": n}), "message.delta", "r1") for n in ns]
    ids = await log.append(keys, "", items)
    return [Entry(i, p.kind, p.data, p.type, p.run_id) for i, p in zip(ids, items, strict=True)]


async def test_entries_fed_while_the_reader_starts_are_kept_once(redis: Redis, prefix: str) -> None:
    """A stream opened as its run starts (``POST …/runs?stream=true``, or a browser that opens
    the SSE as it posts): the owner's first appends reach the reader before its own read of
    the log's end answers, with a position from before them. The reader keeps what it was fed
    and the next feed follows on: each entry in its window once, in order."""
    keys = ConversationKeys.for_conversation("alice", "race", prefix=prefix)
    log = SlowStart(redis)
    reader = LogReader(redis, log, keys, owner_local=lambda: True)
    reader.launch()
    try:
        await asyncio.wait_for(log.asked.wait(), 5)  # the start read went out: log empty
        first = await _append(log, keys, [0, 1])
        reader.feed("0-0", first)  # the run writer's feed, before the start read answers
        log.answer.set()
        await asyncio.wait_for(reader.ready(), 5)
        second = await _append(log, keys, [2])
        reader.feed(first[-1].id, second)

        everything = [e.id for e in first + second]
        # At once when the feed follows on; a reader that thought itself behind gets there
        # by reading Redis (and held the first entries twice).
        await eventually(lambda: reader.last_id == everything[-1])
        assert [e.id for e in reader.window_after((0, 0)) or []] == everything
    finally:
        await reader.stop()


async def test_an_ended_runs_window_entries_are_frozen_and_still_read_alike(
    redis: Redis, prefix: str
) -> None:
    """When a run's terminal reaches the window, the entries before it are kept as tuples the
    collector stops tracking (a full collection walked two objects per retained event); a
    follower that is behind still reads every one of them, in order, with the same frames,
    also across the window's trim."""
    keys = ConversationKeys.for_conversation("alice", "frozen", prefix=prefix)
    log = EventLog(redis, max_len=1000)
    reader = LogReader(redis, log, keys, window=8, owner_local=lambda: True)
    await reader.start()
    try:
        inc = "i1"

        def make(entry: Entry) -> bytes:
            cached = entry.cache.sse if entry.inc == inc else b""
            return entry.data + entry.type.encode() + cached

        def owned(entries: list[Entry]) -> list[Entry]:  # as the owner feeds them
            for entry in entries:
                entry.inc, entry.cache = (
                    inc,
                    LogEntry.of_logged(
                        f"{inc}.{entry.id}".encode(), "event", entry.data, entry.type, entry.run_id
                    ),
                )
            return entries

        deltas = owned(await _append(log, keys, list(range(6))))
        reader.feed("0-0", deltas)
        assert reader.window_view((0, 0), 100, inc, make) == [make(e) for e in deltas]
        assert all(gc.is_tracked(e) for e in reader._entries)

        terminal = await _append(log, keys, [6])
        terminal[0].type = "run.completed"
        owned(terminal)
        reader.feed(deltas[-1].id, terminal)
        gc.collect()
        assert not any(gc.is_tracked(e) for e in reader._entries[:6])  # the ended run's
        assert gc.is_tracked(reader._entries[6])  # the batch with the terminal, as it was
        first = deltas + terminal
        assert reader.window_view((0, 0), 100, inc, make) == [make(e) for e in first]
        assert reader.window_view((0, 0), 2, inc, make) == [make(e) for e in first[:2]]
        assert [e.id for e in reader.window_after((0, 0)) or []] == [e.id for e in first]
        # A thawed entry brings back the LogEntry built when it was logged (no frame again).
        thawed = (reader.window_after((0, 0)) or [])[0]
        assert thawed.inc == inc and thawed.cache.sse == deltas[0].cache.sse

        # More than the window holds: the trim drops the oldest (frozen) entries; reads from
        # what is left stay whole, frozen and live entries alike.
        more = owned(await _append(log, keys, list(range(7, 13))))
        reader.feed(terminal[-1].id, more)
        assert reader.window_view((0, 0), 100, inc, make) is None  # trimmed
        after = parse_id(deltas[4].id)  # the window's base now
        kept = [deltas[5], *terminal, *more]
        assert reader.window_view(after, 100, inc, make) == [make(e) for e in kept]
        assert reader.window_view(parse_id(terminal[0].id), 3, inc, make) == [
            make(e) for e in more[:3]
        ]
        assert [e.id for e in reader.window_after(after) or []] == [e.id for e in kept]
    finally:
        await reader.stop()
