"""The memory backend: the shared contract plus its TTL and LRU eviction."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.backends import ConversationRef, LogEntry, LogItem, MemoryBackend
from tests.app.support.backend_contract import (
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


# -- the batched append: the same log, state and cursors as one append at a time ------------


def _items(deltas: int, extensions: list[int]) -> list[LogItem]:
    """A run's events with extension values between them (at the given positions)."""
    items = [LogItem.of_checked_event(e) for e in run_events("r1", deltas)]
    for at in sorted(extensions, reverse=True):
        items.insert(min(at, len(items)), LogItem.of_extension(f"x{at}", {"at": at}))
    return items


async def _one_at_a_time(
    backend: MemoryBackend, ref: ConversationRef, items: list[LogItem]
) -> list[LogEntry]:
    out: list[LogEntry] = []
    for item in items:
        if item.event is not None:
            out.append(await backend.append_event(ref, item.event))
        else:
            out.append(await backend.append_extension(ref, item.key, item.value))
    return out


@settings(deadline=None, max_examples=40)
@given(
    deltas=st.integers(0, 12),
    extensions=st.lists(st.integers(0, 14), max_size=3),
    cuts=st.lists(st.integers(1, 6), max_size=6),
    log_max=st.integers(1, 8),
)
async def test_append_batch_logs_what_single_appends_log(
    deltas: int, extensions: list[int], cuts: list[int], log_max: int
) -> None:
    """Batches (cut anywhere) give the frames, cursors, retention and state of one append at
    a time: the batched path's one ``extend`` and one trim change nothing a reader sees."""
    items = _items(deltas, extensions)
    single = MemoryBackend(event_log_max_len=log_max)
    batched = MemoryBackend(event_log_max_len=log_max)
    ref = ConversationRef("p", "c")
    await single.create_conversation(ref, meta())
    await batched.create_conversation(ref, meta())
    # The cursors embed each conversation's incarnation: compare them with it taken out.
    one = await _one_at_a_time(single, ref, items)
    many: list[LogEntry] = []
    rest = list(items)
    for cut in [*cuts, len(rest)]:
        batch, rest = rest[:cut], rest[cut:]
        many += await batched.append_batch(ref, batch)
    many += await batched.append_batch(ref, rest)

    def plain(backend: MemoryBackend, frame: bytes) -> bytes:
        incarnation = backend._conversations[ref].incarnation.encode()
        return frame.replace(incarnation + b"-", b"INC-")

    assert [plain(single, e.sse) for e in one] == [plain(batched, e.sse) for e in many]
    assert [e.cursor.split("-")[1] for e in one] == [e.cursor.split("-")[1] for e in many]
    a, b = await single.snapshot(ref), await batched.snapshot(ref)
    assert a is not None and b is not None
    assert a.state == b.state and a.extensions == b.extensions
    for start_a, start_b in zip(
        ["0", *(e.cursor for e in one)], ["0", *(e.cursor for e in many)], strict=True
    ):
        read_a, read_b = single._read_now(ref, start_a, 100), batched._read_now(ref, start_b, 100)
        assert read_a.status == read_b.status
        assert [plain(single, e.sse) for e in read_a.entries] == [
            plain(batched, e.sse) for e in read_b.entries
        ]


def _seen(entry: LogEntry, incarnation: str) -> tuple[Any, ...]:
    """What a reader sees of an entry, the incarnation taken out of its cursor."""
    plain = entry.sse.replace(incarnation.encode() + b"-", b"INC-")
    cursor = entry.cursor.replace(incarnation + "-", "INC-")
    ws = entry.ws.replace(incarnation + "-", "INC-")
    return (plain, cursor, entry.data, ws, entry.kind, entry.event_type, entry.run_id)


@settings(deadline=None, max_examples=40)
@given(
    runs=st.lists(
        st.tuples(st.integers(0, 6), st.lists(st.integers(0, 8), max_size=2)), max_size=4
    ),
    log_max=st.integers(1, 12),
    limit=st.integers(1, 9),
    last_open=st.booleans(),
)
async def test_entries_of_ended_runs_read_back_as_they_were_logged(
    runs: list[tuple[int, list[int]]], log_max: int, limit: int, last_open: bool
) -> None:
    """A run's end moves its entries to the cold log (frozen tuples): every read, from every
    cursor, across the cold and live parts and after trims, gives what a backend whose runs
    never ended gives."""
    live = MemoryBackend(event_log_max_len=log_max)
    ended = MemoryBackend(event_log_max_len=log_max)
    ref = ConversationRef("p", "c")
    for backend in (live, ended):
        await backend.create_conversation(ref, meta())
    cursors: dict[MemoryBackend, list[str]] = {live: ["0"], ended: ["0"]}
    for number, (deltas, extensions) in enumerate(runs):
        run_id = f"r{number}"
        items = [LogItem.of_checked_event(e) for e in run_events(run_id, deltas)]
        for at in sorted(extensions, reverse=True):
            items.insert(min(at, len(items)), LogItem.of_extension(f"x{at}", {"at": at}))
        await ended.claim_run(ref, Control(run_id))
        for backend in (live, ended):
            cursors[backend] += [e.cursor for e in await backend.append_batch(ref, items)]
        if not (last_open and number == len(runs) - 1):  # else reads span cold and live
            await ended.release_run(ref, run_id)
    conv = ended._conversations[ref]
    assert len(conv.log) + len(conv.cold) == min(log_max, len(cursors[ended]) - 1)
    if not last_open:
        assert not conv.log  # every run ended: all of it is cold
    incarnations = {b: b._conversations[ref].incarnation for b in (live, ended)}
    for at_live, at_ended in zip(cursors[live], cursors[ended], strict=True):
        a = live._read_now(ref, at_live, limit)
        b = ended._read_now(ref, at_ended, limit)
        assert a.status == b.status
        assert [_seen(e, incarnations[live]) for e in a.entries] == [
            _seen(e, incarnations[ended]) for e in b.entries
        ]


async def test_a_read_spans_the_cold_log_and_the_live_one() -> None:
    backend = MemoryBackend(event_log_max_len=100)
    ref = ConversationRef("p", "c")
    await backend.create_conversation(ref, meta())
    await backend.claim_run(ref, Control("r1"))
    first = await backend.append_batch(ref, [LogItem.of_event(e) for e in run_events("r1", 3)])
    await backend.release_run(ref, "r1")
    second = await backend.append_batch(ref, [LogItem.of_event(e) for e in run_events("r2", 2)])
    conv = backend._conversations[ref]
    assert len(conv.cold) == 5 and len(conv.log) == 4
    result = await backend.read(ref, first[1].cursor, limit=6, wait=0)
    assert [e.sse for e in result.entries] == [e.sse for e in (*first[2:], *second[:3])]
    assert result.entries[3] is second[0]  # the live part is handed out as it was logged


async def test_the_cold_log_is_not_tracked_by_the_collector() -> None:
    """What a full collection walks for a retained conversation: not its ended runs' entries."""
    backend = MemoryBackend()
    ref = ConversationRef("p", "c")
    await backend.create_conversation(ref, meta())
    await backend.claim_run(ref, Control("r1"))
    await backend.append_batch(ref, [LogItem.of_event(e) for e in run_events("r1", 50)])
    await backend.append_extension(ref, "x", {"deep": [1, 2]})
    conv = backend._conversations[ref]
    assert all(gc.is_tracked(entry) for entry in conv.log)
    await backend.release_run(ref, "r1")
    gc.collect()
    assert len(conv.cold) == 53
    assert not any(gc.is_tracked(frozen) for frozen in conv.cold)


async def test_append_batch_that_raises_midway_leaves_no_gap_in_the_cursors() -> None:
    """An item that cannot be logged (a value JSON cannot hold) ends the batch: what came
    before it is logged and readable, and the next entry takes the very next cursor."""
    backend = MemoryBackend()
    ref = ConversationRef("p", "c")
    await backend.create_conversation(ref, meta())
    good = [LogItem.of_checked_event(e) for e in run_events("r1", 1)]
    with pytest.raises(TypeError):
        await backend.append_batch(ref, [*good, LogItem.of_extension("bad", object())])
    (after,) = await backend.append_batch(ref, [LogItem.of_extension("ok", 1)])
    read = await backend.read(ref, "0", limit=10, wait=0)
    assert read.status == "ok"
    assert [e.cursor for e in read.entries][-1] == after.cursor
    assert [int(e.cursor.split("-")[1]) for e in read.entries] == [1, 2, 3, 4]


async def test_a_reader_woken_after_delete_and_create_again_reads_unknown() -> None:
    """A wait's cursor is reused after the wake-up only in the same incarnation."""
    backend = MemoryBackend()
    ref = ConversationRef("p", "c")
    await backend.create_conversation(ref, meta())
    (first,) = await backend.append_batch(ref, [LogItem.of_extension("a", 1)])
    reader = asyncio.create_task(backend.read(ref, first.cursor, limit=10, wait=5))
    await asyncio.sleep(0)
    await backend.delete(ref)
    await backend.create_conversation(ref, meta())
    await backend.append_batch(ref, [LogItem.of_extension("b", 2), LogItem.of_extension("c", 3)])
    assert (await reader).status == "unknown"


async def test_a_reader_woken_after_its_entries_were_trimmed_reads_trimmed() -> None:
    backend = MemoryBackend(event_log_max_len=2)
    ref = ConversationRef("p", "c")
    await backend.create_conversation(ref, meta())
    (first,) = await backend.append_batch(ref, [LogItem.of_extension("a", 1)])
    reader = asyncio.create_task(backend.read(ref, first.cursor, limit=10, wait=5))
    await asyncio.sleep(0)
    many = [LogItem.of_extension(f"k{i}", i) for i in range(3)]
    await backend.append_batch(ref, many)  # the entry after ``first`` is gone
    assert (await reader).status == "trimmed"
    woken = asyncio.create_task(
        backend.read(ref, (await backend.head_cursor(ref)), limit=10, wait=5)
    )
    await asyncio.sleep(0)
    (last,) = await backend.append_batch(ref, [LogItem.of_extension("z", 9)])
    assert [e.cursor for e in (await woken).entries] == [last.cursor]


# -- the shared wait timer: never late, no timer per delivery, nothing left behind ----------


async def test_a_short_wait_ends_on_time_beside_a_long_one() -> None:
    """The notifier's one timer fires at the earliest deadline: a short wait is never held
    by a longer one already armed; the longer one may end early (an empty read) and waits
    again."""
    backend = MemoryBackend()
    ref = ConversationRef("p", "c")
    await backend.create_conversation(ref, meta())
    head = await backend.head_cursor(ref)
    long = asyncio.ensure_future(backend.read(ref, head, limit=10, wait=30))
    await eventually(lambda: waiters(backend, ref) == 1, what="the long wait")
    started = time.monotonic()
    short = await backend.read(ref, head, limit=10, wait=0.05)
    assert (short.status, short.entries) == ("ok", [])
    assert 0.04 <= time.monotonic() - started < 5
    early = await asyncio.wait_for(long, 5)  # ended with the short one: nothing new
    assert (early.status, early.entries) == ("ok", [])
    assert backend._notifiers == {}


async def test_a_follower_waiting_after_each_delivery_arms_one_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Woken by appends, the notifier keeps its timer for the follower's next wait (no
    ``call_at`` per delivery); once nobody waits, it is forgotten when the timer fires."""
    from app.backends import memory

    armed: list[float] = []
    arm = memory._Notifier.arm

    def counting(self: memory._Notifier, loop: Any, deadline: float, expire: Any) -> None:
        armed.append(deadline)
        arm(self, loop, deadline, expire)

    monkeypatch.setattr(memory._Notifier, "arm", counting)
    backend = MemoryBackend()
    ref = ConversationRef("p", "c")
    await backend.create_conversation(ref, meta())
    head = await backend.head_cursor(ref)
    for i in range(10):
        reader = asyncio.ensure_future(backend.read(ref, head, limit=10, wait=2))
        await asyncio.sleep(0)  # the reader runs to its wait (no sleeps: all within one timer)
        assert waiters(backend, ref) == 1
        (entry,) = await backend.append_batch(ref, [LogItem.of_extension("k", i)])
        assert [e.cursor for e in (await reader).entries] == [entry.cursor]
        head = entry.cursor
    assert len(armed) == 1
    assert ref in backend._notifiers  # kept for the next wait ...
    await eventually(lambda: backend._notifiers == {}, what="the notifier is forgotten")
