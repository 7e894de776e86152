"""The run's event pipe: batches while a write is in flight, bounded buffer, errors surface."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from app.backends import ConversationRef, LogEntry, LogItem, MemoryBackend
from app.runs.event_pipe import EventPipe
from tests.app.backend_contract import event, meta

REF = ConversationRef("p", "c")


class GatedBackend(MemoryBackend):
    """A memory backend whose batch writes wait for ``gate`` (a slow Redis round trip)."""

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
    await asyncio.sleep(0.05)
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
