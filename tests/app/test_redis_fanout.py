"""The instance's log reader of a conversation (``app.backends.redis.fanout``) on a real Redis:
what its run writer feeds while the reader is still reading its starting position is kept, and
the window never holds an entry twice."""

from __future__ import annotations

import asyncio

import orjson
from redis.asyncio import Redis

from app.backends.redis.eventlog import KIND_EVENT, Entry, EventLog, Pending
from app.backends.redis.fanout import LogReader
from app.backends.redis.keys import ConversationKeys
from tests.app.redis_support import prefix, redis
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
