"""The memory backend: the shared contract plus its TTL and LRU eviction."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from app.backends import ConversationRef, LogItem, MemoryBackend
from tests.app.backend_contract import (
    LOG_MAX,
    BackendContract,
    Control,
    event,
    meta,
    run_events,
)
from tests.support import eventually


class TestMemoryBackendContract(BackendContract):
    @pytest.fixture
    async def backend(self) -> AsyncIterator[MemoryBackend]:
        backend = MemoryBackend(event_log_max_len=LOG_MAX)
        await backend.start()
        yield backend
        await backend.close()


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_ttl_drops_idle_conversations_but_not_running_ones() -> None:
    clock = FakeClock()
    backend = MemoryBackend(conversation_ttl_seconds=10, clock=clock)
    idle, busy = ConversationRef("p", "idle"), ConversationRef("p", "busy")
    for ref in (idle, busy):
        await backend.create_conversation(ref, meta())
    await backend.claim_run(busy, Control("r1"))
    clock.now = 11
    backend.sweep()
    assert await backend.snapshot(idle) is None
    assert await backend.snapshot(busy) is not None


async def test_lru_evicts_least_recently_used_idle_conversation() -> None:
    clock = FakeClock()
    backend = MemoryBackend(max_conversations=2, clock=clock)
    a, b, c = (ConversationRef("p", k) for k in "abc")
    await backend.create_conversation(a, meta())
    await backend.claim_run(a, Control("r1"))  # a is running: never evicted
    clock.now = 1
    await backend.create_conversation(b, meta())
    clock.now = 2
    await backend.append_event(b, event("r1", 0, "run.started"))
    await backend.create_conversation(c, meta())
    assert await backend.get_meta(a) is not None
    assert await backend.get_meta(b) is None
    assert await backend.get_meta(c) is not None


async def test_the_per_principal_cap_and_listing_follow_creates_deletes_and_evictions() -> None:
    clock = FakeClock()
    backend = MemoryBackend(max_conversations=3, conversation_ttl_seconds=10, clock=clock)
    mine = [ConversationRef("me", key) for key in ("a", "b")]
    theirs = ConversationRef("other", "x")
    for ref in (*mine, theirs):
        await backend.create_conversation(ref, meta())
    assert not await backend.reserve_conversation(ConversationRef("me", "new"), 2)
    assert await backend.reserve_conversation(mine[0], 2)  # an existing one is always admitted
    assert await backend.reserve_conversation(ConversationRef("other", "y"), 2)
    assert sorted(key for key, _ in await backend.list_conversations("me")) == ["a", "b"]

    assert await backend.delete(mine[0])
    assert await backend.reserve_conversation(ConversationRef("me", "new"), 2)
    assert [key for key, _ in await backend.list_conversations("me")] == ["b"]

    clock.now = 5
    await backend.create_conversation(ConversationRef("other", "y"), meta())
    await backend.create_conversation(ConversationRef("other", "z"), meta())  # evicts me/b (LRU)
    assert await backend.list_conversations("me") == []
    assert await backend.reserve_conversation(ConversationRef("me", "c"), 1)
    clock.now = 20
    backend.sweep()  # the idle TTL drops the rest
    assert await backend.list_conversations("other") == []
    assert await backend.reserve_conversation(ConversationRef("other", "w"), 1)


async def test_reads_from_any_position_of_a_long_trimmed_log() -> None:
    """Reads slice the deque from its nearer end: every start and limit gives the same entries
    as indexing the log, in order (the trimmed head excepted)."""
    backend = MemoryBackend(event_log_max_len=200)
    ref = ConversationRef("alice", "long")
    await backend.create_conversation(ref, meta())
    entries = [
        await backend.append_batch(ref, [LogItem.of_event(e)])
        for e in run_events("run_a", 298)  # 300 entries; the first 100 are trimmed
    ]
    logged = [batch[0] for batch in entries]
    retained = logged[100:]
    for start in (99, 100, 150, 199, 250, 298, 299):
        for limit in (1, 7, 256):
            result = await backend.read(ref, logged[start].cursor, limit=limit, wait=0)
            assert result.status == "ok"
            want = retained[start - 99 : start - 99 + limit]
            assert [e.cursor for e in result.entries] == [e.cursor for e in want]
            assert all(a is b for a, b in zip(result.entries, want, strict=True))
    assert (await backend.read(ref, logged[98].cursor, limit=5, wait=0)).status == "trimmed"


def waiters(backend: MemoryBackend, ref: ConversationRef) -> int:
    """How many reads wait on ``ref``'s next append."""
    notifier = backend._notifiers.get(ref)
    return 0 if notifier is None else len(notifier.waiters)


async def test_waiting_readers_wake_once_per_append_time_out_and_leave_nothing_behind() -> None:
    """Every reader waiting on a conversation wakes on the next append (several waits in a
    row, each after the entries it already read); a wait with nothing new ends at ``wait``;
    a cancelled reader leaves no waiter behind."""
    backend = MemoryBackend()
    ref = ConversationRef("alice", "waits")
    await backend.create_conversation(ref, meta())
    events = run_events("run_w", 3)
    head = await backend.head_cursor(ref)
    for item in events:
        readers = [
            asyncio.ensure_future(backend.read(ref, head, limit=10, wait=30)) for _ in range(3)
        ]
        await eventually(lambda: waiters(backend, ref) == 3, what="the three readers wait")
        assert not any(r.done() for r in readers)
        (entry,) = await backend.append_batch(ref, [LogItem.of_event(item)])
        results = await asyncio.wait_for(asyncio.gather(*readers), 5)
        assert [[e.cursor for e in r.entries] for r in results] == [[entry.cursor]] * 3
        head = entry.cursor
    started = time.monotonic()
    result = await backend.read(ref, head, limit=10, wait=0.05)
    assert result.status == "ok" and result.entries == []
    assert 0.04 <= time.monotonic() - started < 5
    cancelled = asyncio.ensure_future(backend.read(ref, head, limit=10, wait=30))
    await eventually(lambda: waiters(backend, ref) == 1, what="the reader waits")
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert backend._notifiers == {}
