"""The run's event pipe: batches while a write is in flight, bounded buffer, errors surface;
and a run's events through it: one hand-over per upstream read, every check kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.backends import AppendDone, ConversationRef, LogEntry, LogItem, MemoryBackend
from app.observability.metrics import GatewayMetrics
from app.runs.catalog import ProviderCatalog
from app.runs.event_pipe import INLINE_GAP_SECONDS, INLINE_MAX_ITEMS, EventPipe
from app.runs.execute import ActiveRun, RunRequest, execute_run, passes_unchanged
from app.runs.limits import ARTIFACT_EVENTS, cap_artifact
from core.events import validate_event
from core.factory import EventFactory
from core.keys import entity_key
from core.runs import RUN_TERMINAL_TYPES
from providers.contract import AGENT_EVENT_PROTOCOL, AgentTransport, Capabilities, RunOptions
from providers.signal import AbortSignal
from tests.app.support.backend_contract import event, meta
from tests.app.support.gateway_server import make_settings
from tests.support import eventually

REF = ConversationRef("p", "c")


class GatedBackend(MemoryBackend):
    """A memory backend whose batch writes wait for ``gate`` (a slow Redis round trip)."""

    inline_appends = False  # its writes suspend: the pipe hands them to its drain task

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.batches: list[int] = []
        self.fail: Exception | None = None

    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        self.batches.append(len(items))
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return await super().append_batch(ref, items)


def waits_for_space(pipe: EventPipe) -> bool:
    """A producer waits in ``put`` until the write in flight frees the buffer."""
    return not pipe._space.is_set()


async def _backend() -> GatedBackend:
    backend = GatedBackend()
    await backend.create_conversation(REF, meta())
    return backend


async def test_what_accumulates_during_a_write_goes_in_one_batch_in_order() -> None:
    backend = await _backend()
    logged: list[LogEntry] = []
    pipe = EventPipe(backend, REF, logged.extend, max_pending=100)
    for seq in range(10):
        await pipe.put(LogItem.of_event(event("r1", seq, "run.started" if seq == 0 else "x")))
    await asyncio.sleep(0)  # the first write starts with what was queued so far
    for seq in range(10, 30):
        await pipe.put(LogItem.of_event(event("r1", seq, "x")))
    backend.gate.set()
    await pipe.flush()
    assert backend.batches == [10, 20]
    assert [e.decoded()["sequence"] for e in logged] == list(range(30))


async def test_a_full_buffer_makes_the_producer_wait_for_the_write() -> None:
    backend = await _backend()
    pipe = EventPipe(backend, REF, lambda _: None, max_pending=4)
    for seq in range(4):  # the first write takes these, the buffer is empty again
        await pipe.put(LogItem.of_event(event("r1", seq, "x")))
    await asyncio.sleep(0)
    for seq in range(4, 7):
        await pipe.put(LogItem.of_event(event("r1", seq, "x")))
    blocked = asyncio.ensure_future(pipe.put(LogItem.of_event(event("r1", 7, "x"))))
    await eventually(lambda: waits_for_space(pipe), what="the producer waits for space")
    assert not blocked.done()  # 4 wait while a write is in flight: the producer waits
    backend.gate.set()
    await asyncio.wait_for(blocked, 5)
    await pipe.flush()
    assert sum(backend.batches) == 8


async def test_a_failed_write_is_raised_to_the_producer_and_by_flush() -> None:
    backend = await _backend()
    backend.fail = ConnectionError("redis down")
    pipe = EventPipe(backend, REF, lambda _: None)
    await pipe.put(LogItem.of_event(event("r1", 0, "x")))
    backend.gate.set()
    with pytest.raises(ConnectionError):
        await pipe.flush()
    with pytest.raises(ConnectionError):
        await pipe.put(LogItem.of_event(event("r1", 1, "x")))
    await pipe.close()  # does not raise: the error was reported
    snapshot = await backend.snapshot(REF)
    assert snapshot is not None and snapshot.cursor == await backend.head_cursor(REF)


async def test_put_all_queues_a_read_in_order_and_waits_while_the_buffer_is_full() -> None:
    backend = await _backend()
    logged: list[LogEntry] = []
    pipe = EventPipe(backend, REF, logged.extend, max_pending=8)
    await pipe.put(LogItem.of_event(event("r1", 0, "run.started")))
    await asyncio.sleep(0)  # the first write (gated) takes it
    read = [LogItem.of_event(event("r1", seq, "x")) for seq in range(1, 13)]
    blocked = asyncio.ensure_future(pipe.put_all(read))
    await eventually(lambda: waits_for_space(pipe), what="the producer waits for space")
    assert not blocked.done()  # 12 >= 8 wait while a write is in flight
    backend.gate.set()
    await asyncio.wait_for(blocked, 5)
    await pipe.flush()
    assert backend.batches == [1, 12]
    assert [e.decoded()["sequence"] for e in logged] == list(range(13))


class RecordingMemoryBackend(MemoryBackend):
    """An in-process backend that records the size of each batch written."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        self.batches.append(len(items))
        return await super().append_batch(ref, items)


class LoopClock:
    """The running loop's clock, moved only by the test (a loaded CI machine can take more
    than the pipe's inline gap between two awaits)."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def loop_clock(monkeypatch: pytest.MonkeyPatch) -> LoopClock:
    """Freeze the running loop's ``time()`` until ``monkeypatch.undo()`` (no timer is due
    meanwhile: the pipe's writes to a memory backend never sleep)."""
    loop = asyncio.get_running_loop()
    clock = LoopClock(loop.time())
    monkeypatch.setattr(loop, "time", clock)
    return clock


class FailingMemoryBackend(MemoryBackend):
    """An in-process backend whose writes fail (a conversation deleted and created again)."""

    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        raise KeyError("deleted and created again")


async def test_an_in_process_backend_is_written_inline_when_reads_come_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = MemoryBackend()
    await backend.create_conversation(REF, meta())
    logged: list[LogEntry] = []
    pipe = EventPipe(backend, REF, logged.extend, max_pending=4)
    tasks = len(asyncio.all_tasks())
    clock = loop_clock(monkeypatch)
    await pipe.put(LogItem.of_event(event("r1", 0, "run.started")))
    assert [e.decoded()["sequence"] for e in logged] == [0]  # logged before put returned
    clock.advance(INLINE_GAP_SECONDS)  # a slow stream: the next read comes a gap later
    await pipe.put_all([LogItem.of_event(event("r1", seq, "x")) for seq in range(1, 11)])
    monkeypatch.undo()
    assert len(asyncio.all_tasks()) == tasks  # no drain task
    # More than max_pending in one read: written at once, nothing waits for space.
    assert [e.decoded()["sequence"] for e in logged] == list(range(11))
    await pipe.flush()
    snapshot = await backend.snapshot(REF)
    assert snapshot is not None and snapshot.cursor == logged[-1].cursor


async def test_an_inline_write_that_suspends_holds_the_runner_until_it_lands() -> None:
    """A backend whose inline appends take a round trip (Redis): the put of a slow stream's
    read waits for its write, in the runner's task (no drain task), and logs it in order."""
    backend = await _backend()
    backend.inline_appends = True
    logged: list[LogEntry] = []
    pipe = EventPipe(backend, REF, logged.extend)
    tasks = len(asyncio.all_tasks())
    put = asyncio.ensure_future(pipe.put(LogItem.of_event(event("r1", 0, "run.started"))))
    await eventually(lambda: backend.batches == [1], what="the write in flight")
    assert not put.done()
    assert len(asyncio.all_tasks()) == tasks + 1  # the put itself: no drain task
    backend.gate.set()
    await put
    assert [e.decoded()["sequence"] for e in logged] == [0]
    await pipe.put(LogItem.of_event(event("r1", 1, "x")))
    await pipe.flush()
    assert [e.decoded()["sequence"] for e in logged] == [0, 1]


async def _first_read_written_inline(
    monkeypatch: pytest.MonkeyPatch, *, appends_wait: bool = False
) -> tuple[GatedBackend, EventPipe, list[LogEntry], LoopClock, asyncio.Future[None]]:
    """A pipe on a gated backend written inline (a round trip: Redis), the loop's clock
    frozen, the run's start events written, and its first read's put waiting for its write,
    in flight."""
    backend = await _backend()
    backend.inline_appends = True
    backend.appends_wait = appends_wait
    logged: list[LogEntry] = []
    pipe = EventPipe(backend, REF, logged.extend)
    clock = loop_clock(monkeypatch)
    backend.gate.set()
    await pipe.put(LogItem.of_event(event("r1", 0, "run.started")))
    backend.gate.clear()
    put = asyncio.ensure_future(pipe.put(LogItem.of_event(event("r1", 1, "x"))))
    for _ in range(10):  # no timer may fire while the loop's clock is frozen: turns only
        await asyncio.sleep(0)
    assert backend.batches == [1, 1] and not put.done()  # written inline, in flight
    return backend, pipe, logged, clock, put


async def test_a_read_right_after_a_long_inline_write_goes_to_the_drain_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gap is counted from the end of the inline write: a fast stream whose read waited
    for a slow write is batched by the drain task (reads and writes overlap), not written
    inline read after read."""
    backend, pipe, logged, clock, put = await _first_read_written_inline(monkeypatch)
    clock.advance(INLINE_GAP_SECONDS * 5)  # a slow round trip
    backend.gate.set()
    await put
    await pipe.put(LogItem.of_event(event("r1", 2, "x")))  # read at once after it
    assert backend.batches == [1, 1]  # queued for the drain task, not written inline
    monkeypatch.undo()
    await pipe.flush()
    assert backend.batches == [1, 1, 1]
    assert [e.decoded()["sequence"] for e in logged] == [0, 1, 2]


async def test_a_large_read_after_a_gap_goes_to_the_drain_task_on_a_round_trip_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a backend whose appends wait (Redis), a read of more than ``INLINE_MAX_ITEMS``
    events is a fast stream's even when checking it took longer than the gap: the runner does
    not wait for its round trip (the put returns while the write is in flight), and the next
    read is taken meanwhile. A small read after a gap is still written inline."""
    backend, pipe, logged, clock, small = await _first_read_written_inline(
        monkeypatch, appends_wait=True
    )
    backend.gate.set()
    await small
    backend.gate.clear()
    clock.advance(INLINE_GAP_SECONDS * 3)  # the read took its time to check: past the gap
    large = [LogItem.of_event(event("r1", seq, "x")) for seq in range(2, INLINE_MAX_ITEMS + 3)]
    put = asyncio.ensure_future(pipe.put_all(large))
    for _ in range(10):
        await asyncio.sleep(0)
    assert put.done()  # the runner is free: the drain task writes the read
    assert backend.batches == [1, 1, INLINE_MAX_ITEMS + 1]  # in flight
    await pipe.put(LogItem.of_event(event("r1", INLINE_MAX_ITEMS + 3, "x")))  # taken meanwhile
    monkeypatch.undo()
    backend.gate.set()
    await pipe.flush()
    assert backend.batches == [1, 1, INLINE_MAX_ITEMS + 1, 1]
    assert [e.decoded()["sequence"] for e in logged] == list(range(INLINE_MAX_ITEMS + 4))


async def test_reads_that_come_back_to_back_are_batched_by_the_drain_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = RecordingMemoryBackend()
    await backend.create_conversation(REF, meta())
    logged: list[LogEntry] = []
    pipe = EventPipe(backend, REF, logged.extend)
    clock = loop_clock(monkeypatch)
    for seq in range(6):  # a stream at full speed: each read just under the gap after the last
        await pipe.put(LogItem.of_event(event("r1", seq, "run.started" if seq == 0 else "x")))
        clock.advance(INLINE_GAP_SECONDS * 0.9)
    monkeypatch.undo()
    # The start and the first read inline (see the next test), the next four wait for the
    # drain task.
    assert backend.batches == [1, 1]
    await pipe.flush()
    assert backend.batches == [1, 1, 4]
    assert [e.decoded()["sequence"] for e in logged] == list(range(6))


async def test_the_first_read_after_the_start_is_written_inline_however_soon_it_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first put is the run's start events; the upstream's first read comes after its
    round trip (on loopback well under the gap) and has nothing to be batched with: it is
    written at once, not after the reads the runner finds buffered behind it."""
    backend = RecordingMemoryBackend()
    await backend.create_conversation(REF, meta())
    logged: list[LogEntry] = []
    pipe = EventPipe(backend, REF, logged.extend)
    tasks = len(asyncio.all_tasks())
    clock = loop_clock(monkeypatch)
    await pipe.put(LogItem.of_event(event("r1", 0, "run.started")))
    clock.advance(INLINE_GAP_SECONDS * 0.1)
    await pipe.put_all([LogItem.of_event(event("r1", seq, "x")) for seq in (1, 2)])
    assert [e.decoded()["sequence"] for e in logged] == [0, 1, 2]  # before put_all returned
    assert len(asyncio.all_tasks()) == tasks  # no drain task
    clock.advance(INLINE_GAP_SECONDS * 0.1)
    await pipe.put(LogItem.of_event(event("r1", 3, "x")))  # the second read: a fast stream's
    monkeypatch.undo()
    assert backend.batches == [1, 2]
    await pipe.flush()
    assert backend.batches == [1, 2, 1]
    assert [e.decoded()["sequence"] for e in logged] == [0, 1, 2, 3]


async def test_a_failed_inline_write_is_raised_at_the_next_put_and_by_flush() -> None:
    backend = FailingMemoryBackend()
    await backend.create_conversation(REF, meta())
    pipe = EventPipe(backend, REF, lambda _: None)
    await pipe.put(LogItem.of_event(event("r1", 0, "x")))  # fails: reported later, like a drain
    with pytest.raises(KeyError):
        await pipe.put(LogItem.of_event(event("r1", 1, "x")))
    with pytest.raises(KeyError):
        await pipe.flush()
    await pipe.close()  # does not raise: the error was reported


class SoonBackend(MemoryBackend):
    """A round-trip backend (Redis) whose writes start without waiting (``append_soon``):
    their replies come when the test calls :meth:`reply`. ``busy``: its writer is not idle
    (``append_soon`` declines)."""

    inline_appends = True
    appends_wait = True

    def __init__(self) -> None:
        super().__init__()
        self.started: list[list[LogItem]] = []
        self.awaited: list[int] = []
        self.in_flight: list[tuple[list[LogItem], AppendDone]] = []
        self.busy = False
        self.fail: Exception | None = None
        self.fail_to_start: Exception | None = None

    def append_soon(self, ref: ConversationRef, items: Sequence[LogItem], done: AppendDone) -> bool:
        if self.busy:
            return False
        if self.fail_to_start is not None:
            raise self.fail_to_start
        self.started.append(list(items))
        self.in_flight.append((list(items), done))
        return True

    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        self.awaited.append(len(items))
        return await super().append_batch(ref, items)

    async def reply(self, count: int | None = None) -> None:
        """The replies of the writes in flight (``count`` of them: all), in order."""
        while self.in_flight and count != 0:
            count = None if count is None else count - 1
            items, done = self.in_flight.pop(0)
            if self.fail is not None:
                done(None, self.fail)
            else:
                done(await super().append_batch(REF, items), None)


async def _soon_pipe() -> tuple[SoonBackend, EventPipe, list[LogEntry]]:
    backend = SoonBackend()
    await backend.create_conversation(REF, meta())
    logged: list[LogEntry] = []
    return backend, EventPipe(backend, REF, logged.extend), logged


async def test_a_write_started_without_waiting_frees_the_runner_and_is_logged_from_its_reply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A slow stream's read on a backend that starts the write without waiting: the put
    returns at once, with no task and nothing logged yet; the reply logs it; ``flush`` waits
    for it. A read that comes while the backend's writer is busy is awaited as before."""
    backend, pipe, logged = await _soon_pipe()
    tasks = len(asyncio.all_tasks())
    clock = loop_clock(monkeypatch)
    await pipe.put(LogItem.of_event(event("r1", 0, "run.started")))
    assert len(backend.started) == 1 and logged == []  # in flight, the put returned
    assert len(asyncio.all_tasks()) == tasks  # no drain task
    flushed = asyncio.ensure_future(pipe.flush())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not flushed.done()  # waits for the write in flight
    await backend.reply()
    await flushed
    assert [e.decoded()["sequence"] for e in logged] == [0]
    clock.advance(INLINE_GAP_SECONDS)
    await pipe.put(LogItem.of_event(event("r1", 1, "x")))
    backend.busy = True
    clock.advance(INLINE_GAP_SECONDS * 2)
    await backend.reply()
    await pipe.put(LogItem.of_event(event("r1", 2, "x")))  # awaited: declined by the backend
    monkeypatch.undo()
    assert backend.awaited == [1]
    await pipe.close()
    assert [e.decoded()["sequence"] for e in logged] == [0, 1, 2]


async def test_a_write_started_without_waiting_that_fails_is_raised_at_the_next_put_and_by_flush(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend, pipe, logged = await _soon_pipe()
    clock = loop_clock(monkeypatch)
    await pipe.put(LogItem.of_event(event("r1", 0, "run.started")))
    backend.fail = KeyError("deleted and created again")
    closed = asyncio.ensure_future(pipe.close())
    await backend.reply()
    await closed  # does not raise: the error is reported by put and flush
    clock.advance(INLINE_GAP_SECONDS)
    monkeypatch.undo()
    with pytest.raises(KeyError):
        await pipe.put(LogItem.of_event(event("r1", 1, "x")))
    with pytest.raises(KeyError):
        await pipe.flush()
    assert logged == [] and len(backend.started) == 1


def _seqs(batches: list[list[LogItem]]) -> list[list[int]]:
    return [[item.event["sequence"] for item in batch if item.event] for batch in batches]


async def test_reads_that_come_while_such_a_write_is_in_flight_are_written_from_its_reply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reads put while a write not waited for is in flight (a round trip grown past the gap
    between reads, under load) wait for its reply, which writes them in one write, not
    waited for either: no drain task, the runner never waits. The buffer still bounds them."""
    backend, pipe, logged = await _soon_pipe()
    pipe._max = 3
    tasks = len(asyncio.all_tasks())
    clock = loop_clock(monkeypatch)
    await pipe.put(LogItem.of_event(event("r1", 0, "run.started")))
    for seq in (1, 2):
        clock.advance(INLINE_GAP_SECONDS * 2)
        await pipe.put(LogItem.of_event(event("r1", seq, "x")))
    assert _seqs(backend.started) == [[0]] and len(asyncio.all_tasks()) == tasks
    clock.advance(INLINE_GAP_SECONDS * 2)
    full = asyncio.ensure_future(pipe.put(LogItem.of_event(event("r1", 3, "x"))))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not full.done()  # three items wait: the producer waits for the reply
    await backend.reply(1)
    await asyncio.wait_for(full, 5)
    assert _seqs(backend.started) == [[0], [1, 2, 3]]
    assert [e.decoded()["sequence"] for e in logged] == [0]
    backend.busy = True  # the next one is declined: the drain task writes it
    await pipe.put(LogItem.of_event(event("r1", 4, "x")))
    await backend.reply()
    monkeypatch.undo()
    await pipe.flush()
    assert backend.awaited == [1]
    assert [e.decoded()["sequence"] for e in logged] == [0, 1, 2, 3, 4]


async def test_such_a_write_that_fails_to_start_is_reported_as_a_failed_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Raised by ``append_soon`` itself, inline or from a reply: the pipe's error (at the next
    put and by flush), nothing left counted in flight (flush and close do not hang)."""
    backend, pipe, logged = await _soon_pipe()
    clock = loop_clock(monkeypatch)
    await pipe.put(LogItem.of_event(event("r1", 0, "run.started")))
    clock.advance(INLINE_GAP_SECONDS * 2)
    await pipe.put(LogItem.of_event(event("r1", 1, "x")))  # queued behind the first
    backend.fail_to_start = TypeError("not JSON serializable")
    await backend.reply()  # the first lands; starting the second fails
    monkeypatch.undo()
    with pytest.raises(TypeError):
        await pipe.put(LogItem.of_event(event("r1", 2, "x")))
    with pytest.raises(TypeError):
        await asyncio.wait_for(pipe.flush(), 5)
    await asyncio.wait_for(pipe.close(), 5)
    assert [e.decoded()["sequence"] for e in logged] == [0]
    backend2, pipe2, _ = await _soon_pipe()
    backend2.fail_to_start = TypeError("not JSON serializable")
    await pipe2.put(LogItem.of_event(event("r1", 0, "run.started")))  # inline: reported later
    with pytest.raises(TypeError):
        await asyncio.wait_for(pipe2.flush(), 5)


async def test_an_on_logged_that_raises_from_such_a_reply_is_the_pipes_error() -> None:
    backend = SoonBackend()
    await backend.create_conversation(REF, meta())

    def on_logged(entries: list[LogEntry]) -> None:
        raise RuntimeError("the run's hook failed")

    pipe = EventPipe(backend, REF, on_logged)
    await pipe.put(LogItem.of_event(event("r1", 0, "run.started")))
    await backend.reply()
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(pipe.flush(), 5)
    await asyncio.wait_for(pipe.close(), 5)


async def test_a_fast_streams_reads_queued_behind_such_a_write_go_to_the_drain_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More than ``INLINE_MAX_ITEMS`` queued behind a write not waited for: a fast stream's.
    Its reply hands them to the drain task, which gives the producer a loop turn before the
    write (larger batches), instead of writing them from the reply at once."""
    backend, pipe, logged = await _soon_pipe()
    clock = loop_clock(monkeypatch)
    await pipe.put(LogItem.of_event(event("r1", 0, "run.started")))
    clock.advance(INLINE_GAP_SECONDS * 2)
    monkeypatch.undo()
    reads = [
        [LogItem.of_event(event("r1", seq, "x")) for seq in range(first, first + 10)]
        for first in (1, 11)
    ]
    for read in reads:
        await pipe.put_all(read)
    await backend.reply()
    await pipe.flush()
    assert _seqs(backend.started) == [[0]]  # nothing more started without waiting
    assert backend.awaited == [20]  # one drain write
    assert [e.decoded()["sequence"] for e in logged] == list(range(21))


async def test_reads_queued_behind_such_a_write_that_fails_are_not_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend, pipe, logged = await _soon_pipe()
    clock = loop_clock(monkeypatch)
    await pipe.put(LogItem.of_event(event("r1", 0, "run.started")))
    clock.advance(INLINE_GAP_SECONDS * 2)
    await pipe.put(LogItem.of_event(event("r1", 1, "x")))
    backend.fail = KeyError("deleted and created again")
    await backend.reply()
    monkeypatch.undo()
    with pytest.raises(KeyError):
        await pipe.put(LogItem.of_event(event("r1", 2, "x")))
    with pytest.raises(KeyError):
        await pipe.flush()
    assert _seqs(backend.started) == [[0]] and backend.awaited == [] and logged == []


# --- the run's events through execute_run: one hand-over per read, checks kept -------------

SESSION = "ses_test"


class RecordingBackend(MemoryBackend):
    """Records every item appended through ``append_batch`` (and whether it was checked)."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[LogItem] = []

    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        self.items.extend(items)
        return await super().append_batch(ref, items)


class ReadsTransport:
    """The chunks of each upstream read as one list, like ``SSETransport.open_batches``."""

    kind = "async-iterable"

    def __init__(self, reads: list[list[str]]) -> None:
        self.reads = reads

    async def aclose(self) -> None:
        return None

    async def open_batches(self, request: Any, signal: AbortSignal) -> AsyncIterator[list[str]]:
        for read in self.reads:
            yield read
            await asyncio.sleep(0)

    async def open(self, request: Any, signal: AbortSignal) -> AsyncIterator[str]:
        """The transport contract's chunk by chunk reading (the runner takes the batches)."""
        async for read in self.open_batches(request, signal):
            for chunk in read:
                yield chunk


class ReadsProvider:
    """``text`` chunks become deltas, ``big`` an artifact over the inline cap, ``bad`` an
    event with a negative sequence (invalid, protocol.md §1)."""

    id = "reads"
    protocol = AGENT_EVENT_PROTOCOL
    capabilities = Capabilities(
        event_types=(
            "run.started",
            "message.started",
            "message.delta",
            "message.completed",
            "artifact.created",
            "run.completed",
            "run.failed",
        ),
        transports=("async-iterable",),
    )

    def __init__(self, reads: list[list[str]]) -> None:
        self.transport: AgentTransport = ReadsTransport(reads)

    def create_context(self, options: RunOptions) -> EventFactory:
        return EventFactory(options.session_id, options.run_id)

    def start(self, input: Any, ctx: EventFactory) -> list[dict[str, Any]]:
        return [
            ctx.create("run.started", {}),
            ctx.create("message.started", {"messageId": "m", "role": "assistant"}),
        ]

    async def prepare_request(self, input: Any, ctx: EventFactory) -> Any:
        return input

    def transform_chunk(self, chunk: str, ctx: EventFactory) -> list[dict[str, Any]]:
        if chunk == "big":
            payload = {"artifactId": "a", "name": "a", "content": "x" * 64}
            return [ctx.create("artifact.created", payload)]
        event = ctx.create("message.delta", {"messageId": "m", "delta": chunk})
        return [{**event, "sequence": -1}] if chunk == "bad" else [event]

    def flush(self, ctx: EventFactory) -> list[dict[str, Any]]:
        return [
            ctx.create("message.completed", {"messageId": "m"}),
            ctx.create("run.completed", {}),
        ]

    def transform_error(self, error: BaseException, ctx: EventFactory) -> list[dict[str, Any]]:
        failure = {"code": "provider_error", "message": str(error)}
        return [ctx.create("run.failed", {"error": failure})]


async def _execute(reads: list[list[str]]) -> tuple[RecordingBackend, dict[str, Any]]:
    backend = RecordingBackend()
    ref = ConversationRef("p", "run")
    await backend.create_conversation(ref, meta())
    settings = make_settings(limits={"max_inline_artifact_bytes": 16})
    provider = ReadsProvider(reads)
    catalog = ProviderCatalog(settings, {"reads": provider})
    request = RunRequest("r1", {"prompt": "go"}, "reads")
    await execute_run(backend, catalog, settings, ref, request, ActiveRun("r1"), GatewayMetrics())
    snapshot = await backend.snapshot(ref)
    assert snapshot is not None
    return backend, snapshot.state


async def test_a_runs_reads_are_logged_and_only_what_the_gateway_changed_is_revalidated() -> None:
    backend, state = await _execute([["a", "b", "c"], ["big"], ["d"]])
    assert state["runs"]["r1"]["status"] == "completed"
    assert state["messages"][entity_key("r1", "m")]["content"] == "abcd"
    # Capped by the gateway: a changed event is validated by the store again.
    assert [item.checked for item in backend.items if item.event is not None] == [
        True,  # run.started
        True,  # message.started
        True,  # a
        True,  # b
        True,  # c
        False,  # artifact.created, its content cut to the inline cap
        True,  # d
        True,  # message.completed
        True,  # run.completed
    ]
    assert state["artifacts"][entity_key("r1", "a")]["content"] == "x" * 16


async def test_an_invalid_event_mid_read_is_still_caught_and_never_logged() -> None:
    backend, state = await _execute([["a", "b", "bad", "c"], ["d"]])
    logged = [item.event for item in backend.items if item.event is not None]
    assert all(validate_event(e) is None for e in logged)
    deltas = [e["payload"]["delta"] for e in logged if e["type"] == "message.delta"]
    assert deltas == ["a", "b"]  # what passed before it; nothing after
    run = state["runs"]["r1"]
    assert run["status"] == "failed"
    assert run["error"]["code"] == "provider_error"  # the gateway's own terminal


_chunks = st.sampled_from(["a", "b", "big", "c"])


@settings(deadline=None, max_examples=25)
@given(reads=st.lists(st.lists(_chunks, min_size=1, max_size=4), max_size=5))
async def test_reads_the_gateway_leaves_unchanged_are_logged_as_the_general_path_logs_them(
    reads: list[list[str]],
) -> None:
    """Whether a read takes the fast path (nothing in it to cap or decide) or the general
    one, the log holds each event once, in order, revalidated exactly when it was changed."""
    backend, state = await _execute(reads)
    chunks = [chunk for read in reads for chunk in read]
    logged = [item for item in backend.items if item.event is not None]
    types = [item.event["type"] for item in logged if item.event is not None]
    expected = ["run.started", "message.started"]
    expected += ["artifact.created" if c == "big" else "message.delta" for c in chunks]
    assert types == [*expected, "message.completed", "run.completed"]
    assert [item.checked for item in logged] == [t != "artifact.created" for t in types]
    assert state["runs"]["r1"]["status"] == "completed"
    text = "".join(c for c in chunks if c != "big")
    if text:
        assert state["messages"][entity_key("r1", "m")]["content"] == text


_types = st.sampled_from(
    [
        *("message.delta", "run.started", "tool.started"),
        *("artifact.created", "artifact.updated", "artifact.completed"),
        *("run.completed", "run.failed", "run.cancelled"),
    ]
)


@settings(deadline=None, max_examples=200)
@given(types=st.lists(_types, max_size=6), size=st.integers(0, 40))
def test_the_fast_path_is_taken_only_when_no_event_would_be_changed(
    types: list[str], size: int
) -> None:
    """``passes_unchanged`` holds exactly when every event would leave the general loop as
    the same object (no cap) and none is a terminal the gateway decides."""
    events = [
        {"type": t, "runId": "r1", "payload": {"artifactId": "a", "content": "x" * size}}
        for t in types
    ]
    may_change = any(
        cap_artifact(e, 16) is not e or e["type"] in RUN_TERMINAL_TYPES for e in events
    )
    if passes_unchanged(events):
        assert not may_change
    else:  # an artifact (capped or not) or a terminal: the general loop decides
        assert any(e["type"] in ARTIFACT_EVENTS | RUN_TERMINAL_TYPES for e in events)
