"""Hot-path properties measured by the benches: coalesced SSE writes (joined once per range,
untimed when they cannot block), right-sized log entries."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Any, ClassVar, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sse_starlette.sse import SendTimeoutError
from starlette.types import Message, Send

from app.backends import EMPTY_CURSOR, ConversationRef, LogEntry
from app.compat import uvicorn_fast
from app.gateway import Gateway
from app.streams import sse
from app.streams.follow import (
    LINGER_MAX,
    LINGER_PER_FOLLOWER,
    Follow,
    _followers,
    follow,
    follow_batches,
    linger_seconds,
)
from app.streams.sse import _coalesced, _frames, _GatewayEventSource, _Sender
from tests.app.support.backend_contract import event, meta, run_events
from tests.app.support.gateway_server import gateway_on

REF = ConversationRef("alice", "c1")


@pytest.fixture
async def gateway(backend_kind: str) -> AsyncIterator[Gateway]:
    async with gateway_on(backend_kind) as gateway:
        await gateway.backend.create_conversation(REF, meta())
        yield gateway


async def _log(gateway: Gateway, events: list[dict[str, object]]) -> list[LogEntry]:
    return [await gateway.backend.append_event(REF, e) for e in events]


async def test_a_subscriber_behind_gets_everything_logged_since_its_read_as_one_batch(
    gateway: Gateway,
) -> None:
    entries = await _log(gateway, run_events("run_a", 5))
    spec = Follow(start=EMPTY_CURSOR, until_idle=True)
    batches = [b async for b in follow_batches(gateway, REF, spec)]
    assert len(batches) == 1
    assert [e.cursor for e in batches[0]] == [e.cursor for e in entries]  # type: ignore[union-attr]
    flat = [e async for e in follow(gateway, REF, spec)]
    assert [e.cursor for e in flat] == [e.cursor for e in entries]  # type: ignore[union-attr]


async def test_until_run_stops_inside_a_batch_after_that_runs_terminal(gateway: Gateway) -> None:
    first = await _log(gateway, [*run_events("run_a", 2), event("run_a", 4, "run.completed")])
    await _log(gateway, [event("run_b", 0, "run.started")])
    spec = Follow(start=EMPTY_CURSOR, until_run="run_a")
    batches = [b async for b in follow_batches(gateway, REF, spec)]
    assert [[e.cursor for e in b] for b in batches] == [[e.cursor for e in first]]  # type: ignore[union-attr]


async def test_sse_frames_of_a_batch_are_one_write_with_every_frame_once(
    gateway: Gateway,
) -> None:
    entries = await _log(gateway, run_events("run_a", 4))
    writes = [w async for w in _frames(gateway, REF, Follow(start=EMPTY_CURSOR, until_idle=True))]
    assert writes == [b"retry: 2000\n" + b"".join(e.sse for e in entries)]


def test_log_entries_keep_right_sized_data() -> None:
    """orjson.dumps answers on a 4 KiB buffer; 1,000 retained entries must not cost 4 MB."""
    sample = event("run_a", 7, "message.delta", {"messageId": "m1", "delta": "hello"})
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [LogEntry.for_event(f"x-{i}", sample) for i in range(1000)]
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(kept[0].data) < 400
    assert grown < 1000 * 1024, f"{grown / 1000:.0f} bytes per entry"


def test_followers_of_a_busy_conversation_pace_their_reads() -> None:
    assert linger_seconds(1) == 0.0
    assert linger_seconds(10) == 0.0
    assert linger_seconds(50) == pytest.approx(50 * LINGER_PER_FOLLOWER)
    assert linger_seconds(100_000) == LINGER_MAX


async def test_followers_are_counted_while_they_follow_and_released_after(
    gateway: Gateway,
) -> None:
    await _log(gateway, run_events("run_a", 3))
    spec = Follow(start=EMPTY_CURSOR, until_idle=True)
    first = follow_batches(gateway, REF, spec)
    second = cast(AsyncGenerator[Any, None], follow_batches(gateway, REF, spec))
    assert isinstance(await anext(first), list)
    assert isinstance(await anext(second), list)
    assert _followers[gateway][REF] == 2
    assert [b async for b in first] == []
    await second.aclose()
    assert REF not in _followers[gateway]


async def test_followers_reading_the_same_range_send_the_same_bytes_joined_once(
    gateway: Gateway,
) -> None:
    entries = await _log(gateway, run_events("run_a", 6))
    first = list(_coalesced(entries))
    again = list(_coalesced(list(entries)))  # another follower's read of the same range
    assert first == [b"".join(e.sse for e in entries)]
    assert again[0] is first[0]
    # Same first entry, another range: joined anew, never the cached bytes.
    shorter = list(_coalesced(entries[:-1]))
    assert shorter == [b"".join(e.sse for e in entries[:-1])]
    later = await _log(gateway, [event("run_a", 9, "message.delta", {"delta": "x"})])
    longer = list(_coalesced(entries + later))
    assert longer == [b"".join(e.sse for e in entries + later)]


async def test_sends_that_cannot_block_are_not_timed_and_others_still_drop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uvicorn's send suspends only while its transport is paused for writing: a send when it
    is not paused goes without a timer; a send when it is paused drops past the timeout."""
    timed: list[float | None] = []
    send_within = sse._send_within

    def spy(send: Awaitable[None], seconds: float | None) -> Awaitable[None]:
        timed.append(seconds)
        return send_within(send, seconds)

    monkeypatch.setattr(sse, "_send_within", spy)

    class Flow:
        write_paused = False

    class Cycle:
        flow = Flow()
        sent: ClassVar[list[bytes]] = []

        async def send(self, message: Message) -> None:
            if self.flow.write_paused:
                await asyncio.Event().wait()  # a peer that never reads
            self.sent.append(message["body"])

    cycle = Cycle()
    cycle.transport = asyncio.Transport()  # type: ignore[attr-defined]
    connection = uvicorn_fast.connection_of(cycle.send)
    assert connection is not None and connection.flow is cycle.flow
    sender = _Sender(cycle.send, connection.flow, 0.05)
    await sender(b"x")
    assert cycle.sent == [b"x"] and timed == []
    Flow.write_paused = True
    with pytest.raises(SendTimeoutError):
        await asyncio.wait_for(sender(b"x"), 5)
    assert timed == [0.05]
    # another server: every send is timed
    assert uvicorn_fast.connection_of(cast(Send, None)) is None
    Flow.write_paused = False
    await asyncio.wait_for(_Sender(cycle.send, None, 0.05)(b"y"), 5)
    assert cycle.sent == [b"x", b"y"] and timed == [0.05, 0.05]


@settings(deadline=None, max_examples=60)
@given(sizes=st.lists(st.integers(0, 3 * sse.COALESCE_BYTES // 2), min_size=1, max_size=4))
def test_the_sends_of_a_read_are_what_coalescing_yields(sizes: list[int]) -> None:
    """``_sends`` (one small entry: its frame as is) sends the bytes ``_coalesced`` sends, in
    the same pieces."""
    entries = [
        LogEntry.for_event(f"x-{i}", {"type": "message.delta", "pad": "p" * size})
        for i, size in enumerate(sizes)
    ]
    sse._joined.clear()
    fast = [bytes(piece) for piece in sse._sends(entries)]
    sse._joined.clear()
    assert fast == [bytes(piece) for piece in _coalesced(entries)]
    assert b"".join(fast) == b"".join(e.sse for e in entries)


@pytest.mark.parametrize("opens_with_snapshot", [True, False])
async def test_no_heartbeat_comes_before_the_opening_snapshot(opens_with_snapshot: bool) -> None:
    """A stream that opens with its snapshot sends it before any ``: ping``, however slow the
    snapshot (a loaded Redis); a resumed stream, which may wait long for its first event,
    keeps its heartbeats from the start. Pings follow as usual after the first frame."""
    sent: list[bytes] = []
    pinged = asyncio.Event()

    async def frames() -> AsyncGenerator[bytes, None]:
        await asyncio.sleep(0.2)  # the slow snapshot: ten heartbeat intervals
        yield b"event: snapshot\ndata: {}\n\n"
        await pinged.wait()

    async def send(message: Message) -> None:
        body = message.get("body", b"")
        sent.append(body)
        if body.startswith(b": ping") and b"event: snapshot" in b"".join(sent):
            pinged.set()

    async def receive() -> Message:
        await asyncio.Event().wait()  # the client never leaves
        raise AssertionError

    stream = frames()
    response = _GatewayEventSource(stream, ping=0.02, ping_message_factory=sse._ping, sep="\n")
    response.frames = stream
    if opens_with_snapshot:
        response.first_frame = asyncio.Event()
    scope = {"type": "http", "method": "GET", "extensions": {}}
    await asyncio.wait_for(response._serve(scope, receive, send, None, None), 10)
    bodies = [body for body in sent if body]
    first_ping = next(i for i, body in enumerate(bodies) if body.startswith(b": ping"))
    snapshot_at = next(i for i, body in enumerate(bodies) if b"event: snapshot" in body)
    assert (snapshot_at < first_ping) is opens_with_snapshot
