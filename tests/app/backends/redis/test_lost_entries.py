"""A cursor of an entry the log no longer holds reads as gone (a snapshot), never as a position.

A Redis restarted from an AOF that missed its last writes loses the newest entries of a log,
and the entries appended after the restart follow the lost ones' ids. Here the entries are
taken out with ``XDEL`` (the same hole in the log, on the shared Redis, no restart): a reader
of another instance resuming from a taken-out entry's cursor gets ``trimmed`` (its caller sends
a snapshot), from its window's catch-up reads as from Redis; a kept cursor reads on as usual.
The whole crash, with the gateway's own windows and its run owner: ``test_redis_crash.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.backends import ConversationRef, LogEntry
from app.backends.redis import RedisBackend, redis_client
from tests.app.support.backend_contract import event, meta
from tests.app.support.redis_support import SHARED_REDIS_URL, prefix, redis, shared_redis

__all__ = ["prefix", "redis"]

REF = ConversationRef("alice", "c1")


@pytest.fixture
async def instances(prefix: str) -> AsyncIterator[tuple[RedisBackend, RedisBackend]]:
    """Two instances of the backend on the shared Redis under the test's prefix."""
    backends = [
        RedisBackend(redis_client(SHARED_REDIS_URL), key_prefix=prefix, instance_id=name)
        for name in ("a", "b")
    ]
    async with shared_redis(prefix):
        for backend in backends:
            await backend.start()
        try:
            yield backends[0], backends[1]
        finally:
            for backend in backends:
                await backend.close()


async def _logged_with_hole(writer: RedisBackend) -> tuple[list[LogEntry], list[LogEntry]]:
    """Seven events logged, the 4th and 5th taken out again: (all seven, the two taken out)."""
    await writer.create_conversation(REF, meta())
    logged = [await writer.append_event(REF, event("r1", 0, "run.started"))]
    for seq in range(1, 7):
        logged.append(
            await writer.append_event(REF, event("r1", seq, "custom", {"name": "n", "value": seq}))
        )
    gone = logged[3:5]
    log_key = writer.keys(REF).log
    removed = await writer.redis.xdel(log_key, *[e.cursor.rpartition(".")[2] for e in gone])
    assert removed == 2
    return logged, gone


async def test_a_taken_out_cursor_reads_as_trimmed_on_another_instance(
    instances: tuple[RedisBackend, RedisBackend],
) -> None:
    a, b = instances
    logged, gone = await _logged_with_hole(a)
    for entry in gone:
        result = await b.read(REF, entry.cursor, limit=100, wait=0)
        assert result.status == "trimmed", [e.cursor for e in result.entries]
    kept = await b.read(REF, logged[2].cursor, limit=100, wait=0)
    assert kept.status == "ok"
    assert [e.cursor for e in kept.entries] == [e.cursor for e in logged[5:]]


async def test_a_taken_out_cursor_reads_as_trimmed_from_a_catch_up_read(
    instances: tuple[RedisBackend, RedisBackend],
) -> None:
    """A read from the first entry first (its entries are kept for the readers behind the
    window): a taken-out cursor inside what it read is not served from it."""
    a, b = instances
    logged, gone = await _logged_with_hole(a)
    behind = await b.read(REF, logged[0].cursor, limit=100, wait=0)
    assert behind.status == "ok"
    assert [e.cursor for e in behind.entries] == [e.cursor for e in logged[1:] if e not in gone]
    for entry in gone:
        result = await b.read(REF, entry.cursor, limit=100, wait=0)
        assert result.status == "trimmed", [e.cursor for e in result.entries]
    kept = await b.read(REF, logged[1].cursor, limit=100, wait=0)
    assert [e.cursor for e in kept.entries] == [logged[2].cursor] + [e.cursor for e in logged[5:]]
