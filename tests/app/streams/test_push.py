"""Pushed deliveries: a follower waiting at the head gets what is appended written by the
appending task (no wake-up), and never loses, repeats or reorders an entry: the memory
backend's read sinks, the follower's sink, the SSE pusher, and a real stream over uvicorn."""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import AsyncGenerator, Coroutine
from typing import Any, cast

import pytest
from httpx_sse import ServerSentEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from starlette.types import Message

from app.backends import EMPTY_CURSOR, ConversationRef, LogEntry, LogItem, MemoryBackend
from app.backends.redis.eventlog import Entry, EventLog
from app.backends.redis.fanout import LogReader, SinkWait
from app.backends.redis.keys import ConversationKeys
from app.gateway import Gateway
from app.streams import follow as follow_module
from app.streams import sse
from app.streams.follow import Follow, follow_batches
from tests.app.streams.push_support import follow_a_gated_run, parked_with_sink
from tests.app.support.backend_contract import event, meta, run_events
from tests.app.support.gateway_server import StartGateway, gateway_on, make_settings
from tests.app.support.helpers import collect_sse, events_of, start_run, terminal
from tests.app.support.scripted_provider import ScriptedProvider
from tests.support import eventually

REF = ConversationRef("alice", "c1")


def items(events: list[dict[str, Any]]) -> list[LogItem]:
    return [LogItem.of_event(e) for e in events]


# --- the memory backend's read sinks -------------------------------------------------------


async def test_a_sink_takes_what_is_appended_at_the_head_and_the_read_keeps_waiting() -> None:
    backend = MemoryBackend()
    await backend.create_conversation(REF, meta())
    events = run_events("r1", 6)
    (head,) = await backend.append_batch(REF, items(events[:1]))
    taken: list[list[str]] = []
    refuse = asyncio.Event()

    def sink(entries: list[LogEntry]) -> bool:
        if refuse.is_set():
            return False
        taken.append([e.cursor for e in entries])
        return True

    reading = asyncio.create_task(backend.read(REF, head.cursor, limit=100, wait=30, sink=sink))
    await eventually(lambda: parked_with_sink(backend, REF))
    first = await backend.append_batch(REF, items(events[1:3]))
    second = await backend.append_batch(REF, items(events[3:4]))
    assert taken == [[e.cursor for e in first], [e.cursor for e in second]]
    assert not reading.done() and parked_with_sink(backend, REF)  # still waiting, not woken
    refuse.set()
    third = await backend.append_batch(REF, items(events[4:6]))
    result = await asyncio.wait_for(reading, 5)
    assert [e.cursor for e in result.entries] == [e.cursor for e in third]  # after the taken


@pytest.mark.parametrize("behaviour", ["refuses", "raises"])
async def test_a_sink_that_refuses_or_fails_wakes_the_reader_and_the_append_stands(
    behaviour: str,
) -> None:
    backend = MemoryBackend()
    await backend.create_conversation(REF, meta())
    events = run_events("r1", 2)
    (head,) = await backend.append_batch(REF, items(events[:1]))

    def sink(entries: list[LogEntry]) -> bool:
        if behaviour == "raises":
            raise RuntimeError("the subscriber's connection broke")
        return False

    reading = asyncio.create_task(backend.read(REF, head.cursor, limit=100, wait=30, sink=sink))
    await eventually(lambda: parked_with_sink(backend, REF))
    appended = await backend.append_batch(REF, items(events[1:]))
    result = await asyncio.wait_for(reading, 5)
    assert [e.cursor for e in result.entries] == [e.cursor for e in appended]
    assert (await backend.head_cursor(REF)) == appended[-1].cursor


async def test_a_read_that_times_out_after_taking_returns_nothing_taken_again() -> None:
    backend = MemoryBackend()
    await backend.create_conversation(REF, meta())
    events = run_events("r1", 1)
    (head,) = await backend.append_batch(REF, items(events[:1]))
    taken: list[LogEntry] = []

    def sink(entries: list[LogEntry]) -> bool:
        taken.extend(entries)
        return True

    reading = asyncio.create_task(backend.read(REF, head.cursor, limit=100, wait=0.3, sink=sink))
    await eventually(lambda: parked_with_sink(backend, REF))
    await backend.append_batch(REF, items(events[1:]))
    result = await asyncio.wait_for(reading, 5)
    assert result.status == "ok" and result.entries == [] and len(taken) == 2


# --- the follower: every entry once, in order, pushed or yielded ---------------------------

TYPES = ("message.delta", "run.completed")


async def _follow_with_pushes(
    backend_kind: str, batches: list[list[str]], answers: list[bool], followers: int
) -> tuple[list[str], list[str], set[str], list[str]]:
    """Append ``batches`` (types of a run's events after ``run.started``) one after another,
    each once the follower has caught up; ``push`` answers from ``answers`` (cycled)."""
    async with gateway_on(backend_kind) as gateway:
        return await _follow_pushes_on(gateway, batches, answers, followers)


async def _follow_pushes_on(
    gateway: Gateway, batches: list[list[str]], answers: list[bool], followers: int
) -> tuple[list[str], list[str], set[str], list[str]]:
    await gateway.backend.create_conversation(REF, meta())
    counts = follow_module._followers.setdefault(gateway, Counter())
    counts[REF] += followers - 1  # others following the same conversation: pacing
    seen: list[str] = []
    pushed: set[str] = set()
    calls = 0

    def push(entries: list[LogEntry]) -> bool:
        nonlocal calls
        answer = answers[calls % len(answers)]
        calls += 1
        if answer:
            seen.extend(e.cursor for e in entries)
            pushed.update(e.cursor for e in entries)
        return answer

    async def consume() -> None:
        async for item in follow_batches(gateway, REF, Follow(start=EMPTY_CURSOR), push):
            assert isinstance(item, list)
            seen.extend(e.cursor for e in item)

    consumer = asyncio.create_task(consume())
    logged: list[str] = []
    terminal_cursors: list[str] = []
    seq = 0
    run = 0
    try:
        for types in batches:
            events = [event(f"r{run}", 0, "run.started")] if seq == 0 else []
            seq = max(seq, 1)
            for type_ in types:
                if type_ == "run.completed":
                    events.append(event(f"r{run}", seq, type_))
                    run, seq = run + 1, 0
                    break
                events.append(event(f"r{run}", seq, "message.delta", {"delta": "x"}))
                seq += 1
            entries = await gateway.backend.append_batch(REF, items(events))
            logged.extend(e.cursor for e in entries)
            terminal_cursors.extend(e.cursor for e in entries if e.is_run_terminal)
            await eventually(
                lambda: len(seen) == len(logged) and parked_with_sink(gateway.backend, REF)
            )
    finally:
        consumer.cancel()
        counts[REF] -= followers - 1
    return seen, logged, pushed, terminal_cursors


# backend_kind is a plain string: the same for every example.
@settings(
    deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(st.lists(st.sampled_from(TYPES), min_size=1, max_size=4), max_size=6),
    answers=st.lists(st.booleans(), min_size=1, max_size=4),
)
def test_every_entry_reaches_the_follower_once_in_order_pushed_or_yielded(
    backend_kind: str, batches: list[list[str]], answers: list[bool]
) -> None:
    seen, logged, pushed, terminals = asyncio.run(
        _follow_with_pushes(backend_kind, batches, answers, 1)
    )
    assert seen == logged
    assert pushed.isdisjoint(terminals)  # a run's end is yielded: it decides when to stop


async def test_paced_followers_are_never_pushed_to(backend_kind: str) -> None:
    batches = [["message.delta"]] * 3
    seen, logged, pushed, _ = await _follow_with_pushes(backend_kind, batches, [True], 40)
    assert seen == logged and not pushed


# --- the SSE pusher ------------------------------------------------------------------------


class Flow:
    write_paused = False


class Cycle:
    """uvicorn's response cycle as the pusher sees it: a send that waits only when paused."""

    sent: list[bytes]

    def __init__(self) -> None:
        self.flow = Flow()
        self.sent = []

    async def send(self, message: Message) -> None:
        if self.flow.write_paused:
            await asyncio.Event().wait()
        self.sent.append(bytes(message["body"]))


def entry(seq: int, size: int = 10) -> LogEntry:
    return LogEntry.for_event(f"i-{seq}", {"type": "message.delta", "pad": "p" * size})


async def test_the_pusher_writes_one_send_only_when_it_cannot_wait() -> None:
    cycle = Cycle()
    pusher = sse._Pusher()
    one = [entry(1)]
    assert not pusher(one)  # not ready: the response has not sent its first frame
    pusher.server_send, pusher.flow, pusher.ready = cycle.send, cycle.flow, True
    assert pusher(one) and cycle.sent == [one[0].sse]
    two = [entry(2), entry(3)]
    assert pusher(two) and cycle.sent[-1] == two[0].sse + two[1].sse  # joined: one send
    big = [entry(4, sse.COALESCE_BYTES), entry(5, sse.COALESCE_BYTES)]
    assert not pusher(big) and len(cycle.sent) == 2  # more than one send: the follower's
    cycle.flow.write_paused = True
    assert not pusher(one) and len(cycle.sent) == 2  # paused: nothing written


async def test_a_send_that_would_wait_is_not_pushed_and_writes_nothing() -> None:
    cycle = Cycle()
    started: list[Coroutine[Any, Any, None]] = []

    def send(message: Message) -> Coroutine[Any, Any, None]:
        cycle.flow.write_paused = True  # paused by the time it runs: it waits
        coroutine = cycle.send(message)
        started.append(coroutine)
        return coroutine

    pusher = sse._Pusher()
    pusher.server_send, pusher.flow, pusher.ready = send, Flow(), True
    assert not pusher([entry(1)])
    closed = inspect.getcoroutinestate(started[0]) == inspect.CORO_CLOSED
    assert cycle.sent == [] and closed  # closed, not left pending


async def test_the_pusher_is_ready_only_after_the_first_frame_with_its_retry_was_sent(
    backend_kind: str,
) -> None:
    """A heartbeat sent first does not count: the first frame must carry ``retry:``."""
    async with gateway_on(backend_kind) as gateway:
        await _pusher_ready_after_the_first_frame(gateway)


async def _pusher_ready_after_the_first_frame(gateway: Gateway) -> None:
    await gateway.backend.create_conversation(REF, meta())
    entries = [await gateway.backend.append_event(REF, e) for e in run_events("r1", 2)]
    pusher = sse._Pusher()
    cycle = Cycle()
    pusher.server_send, pusher.flow = cycle.send, cycle.flow
    await sse._Sender(cycle.send, cycle.flow, 5)(b": ping\n\n")  # a heartbeat, sent first
    assert cycle.sent == [b": ping\n\n"] and not pusher.ready
    frames = sse._frames(gateway, REF, Follow(since=entries[0].cursor, until_idle=True), pusher)
    first = await frames.__anext__()
    assert isinstance(first, bytes)
    assert first.startswith(b"retry: ") and not pusher.ready  # yielded, not yet sent
    assert [f async for f in frames] == []  # resumed once it was sent: the rest, then the end
    assert pusher.ready


# --- a real stream over uvicorn ------------------------------------------------------------


async def test_a_subscriber_at_the_head_gets_pushed_frames_exactly_once(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delta after each gate is pushed (memory: by the append; Redis: by the run writer's
    feed of the instance's log reader), and every event arrives once, in order
    (:func:`~tests.app.streams.push_support.follow_a_gated_run` asserts both)."""
    provider = ScriptedProvider()
    gw = await start_gateway(make_settings(), providers={"demo": provider})
    await follow_a_gated_run(gw, provider, monkeypatch)


# --- Redis: the instance's log reader offers what its run writer feeds ---------------------


class Made:
    """A LogEntry stand-in: what a read makes of a window entry (its cursor)."""

    def __init__(self, entry: Entry) -> None:
        self.cursor = f"inc-{entry.id}"


def fed(ids: list[str]) -> list[Entry]:
    return [Entry(i, "event", b"{}", "message.delta", "r1") for i in ids]


async def test_the_log_reader_offers_a_feed_to_reads_waiting_at_its_head() -> None:
    reader = LogReader(Redis(), EventLog(Redis(), 100), ConversationKeys.for_conversation("p", "c"))
    reader.feed("0-0", fed(["1-0"]))
    taken: list[list[str]] = []
    refuse = False

    def sink(entries: list[LogEntry]) -> bool:
        if refuse:
            return False
        taken.append([e.cursor for e in entries])
        return True

    at_head = SinkWait(reader.last_pos, sink, "inc", Made)
    behind = SinkWait((0, 0), sink, "inc", Made)  # not right before what comes next
    waiting = [
        asyncio.create_task(reader.wait(reader.version, 30, sinking))
        for sinking in (at_head, behind)
    ]
    await eventually(lambda: len(reader._waiters) == 2)
    reader.feed("1-0", fed(["2-0", "3-0"]))
    await eventually(lambda: waiting[1].done())  # woken: it reads the window itself
    assert taken == [["inc-2-0", "inc-3-0"]] and not waiting[0].done()
    assert at_head.cursor == "inc-3-0" and at_head.pos == (3, 0)
    reader.feed("2-0", fed(["3-0", "4-0"]))  # 3-0 fed again (a retry): only 4-0 is new
    assert taken[-1] == ["inc-4-0"] and not waiting[0].done()
    refuse = True
    reader.feed("4-0", fed(["5-0"]))
    await asyncio.wait_for(waiting[0], 5)  # refused: woken
    assert at_head.cursor == "inc-4-0"  # the read goes on after what was taken


async def test_a_feed_hands_the_writers_own_entries_to_sinks_of_its_incarnation() -> None:
    """The run writer feeds the LogEntries it built: a sink of that incarnation at the head is
    handed that very list (nothing made again) and a read of the window then gets those same
    entries; a sink of another incarnation gets what the read makes."""
    reader = LogReader(Redis(), EventLog(Redis(), 100), ConversationKeys.for_conversation("p", "c"))
    reader.feed("0-0", fed(["1-0"]))
    view = reader.window_view((0, 0), 10, "inc", Made)
    assert view is not None
    assert [e.cursor for e in view] == ["inc-1-0"]
    taken: list[list[Any]] = []

    def sink(entries: list[Any]) -> bool:
        taken.append(entries)
        return True

    async def fed_while_waiting(sinking: SinkWait, ids: list[str], made: Any) -> None:
        waiting = asyncio.create_task(reader.wait(reader.version, 30, sinking))
        await eventually(lambda: len(reader._waiters) == 1)
        reader.feed(f"{int(ids[0][0]) - 1}-0", fed(ids), made=made)
        assert not waiting.done()  # its sink took them
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)

    ours = SinkWait(reader.last_pos, sink, "inc", Made)
    written = [Made(e) for e in fed(["2-0", "3-0"])]
    await fed_while_waiting(ours, ["2-0", "3-0"], ("inc", cast(list[LogEntry], written)))
    assert taken[-1] is written and ours.cursor == "inc-3-0"
    assert reader.window_view((1, 0), 10, "inc", Made) == written  # kept, not made again

    other = SinkWait(reader.last_pos, sink, "inc-2", Made)
    written = [Made(e) for e in fed(["4-0"])]
    await fed_while_waiting(other, ["4-0"], ("inc", cast(list[LogEntry], written)))
    assert [e.cursor for e in taken[-1]] == ["inc-4-0"] and taken[-1][0] is not written[0]


async def test_a_follower_of_the_window_wakes_at_each_feed() -> None:
    """``LogReader.follow`` waits on the reader's signal, made when asked for: each feed
    ends the wait."""
    reader = LogReader(Redis(), EventLog(Redis(), 100), ConversationKeys.for_conversation("p", "c"))
    reader.feed("0-0", fed(["1-0"]))
    batches = reader.follow("1-0")
    for i in range(2, 5):
        step = asyncio.ensure_future(anext(batches))
        await eventually(lambda: reader._signal is not None)  # the follower waits on it
        reader.feed(f"{i - 1}-0", fed([f"{i}-0"]))
        batch = await asyncio.wait_for(step, 5)
        assert [e.id for e in batch] == [f"{i}-0"]  # type: ignore[union-attr]
    await cast(AsyncGenerator[object, None], batches).aclose()  # follow is an async generator


def _deltas(frames: list[ServerSentEvent]) -> int:
    return sum(e["type"] == "message.delta" for e in events_of(frames))


async def test_subscribers_resuming_from_every_cursor_at_once_get_every_event_once(
    start_gateway: StartGateway,
) -> None:
    """Over real connections, all at once: a subscriber per cursor of an ended run (on the
    memory backend its entries are cold, frozen tuples) resumes while the next run streams;
    that run then ends (its entries frozen while the slower subscribers still read them).
    Each gets exactly the events after its cursor, in order, without a snapshot."""
    provider = ScriptedProvider()
    gw = await start_gateway(make_settings(), providers={"demo": provider})
    path = "/v1/conversations/cold/events"
    async with gw.client() as client:

        def resume(cursor: str, **kwargs: Any) -> Coroutine[Any, Any, list[ServerSentEvent]]:
            params = {"since": cursor, "untilIdle": "true"}
            return collect_sse(client, path, params=params, **kwargs)

        await start_run(client, "cold", "text:6")
        ended = await resume(EMPTY_CURSOR)  # run 1, to its terminal
        assert terminal(ended)
        cursors = [EMPTY_CURSOR, *(frame.id for frame in ended)]
        second = await start_run(client, "cold", "text:3 gate:g text:3")
        await resume(cursors[-1], stop=lambda f: _deltas(f) == 3)  # run 2 waits at its gate
        started = [asyncio.Event() for _ in cursors]
        readers = [
            asyncio.create_task(resume(cursor, first_frame=event))
            for cursor, event in zip(cursors, started, strict=True)
        ]
        await asyncio.gather(*(event.wait() for event in started))
        provider.gates["g"].set()
        got = await asyncio.gather(*readers)
        whole = await resume(EMPTY_CURSOR)
    assert events_of(whole)[-1]["runId"] == second["runId"] and terminal(whole)
    assert _deltas(whole) == 12
    ids = [frame.id for frame in whole]
    for cursor, frames in zip(cursors, got, strict=True):
        skip = 0 if cursor == EMPTY_CURSOR else ids.index(cursor) + 1
        assert [frame.event for frame in frames] == ["message"] * len(frames)  # no snapshot
        assert [frame.id for frame in frames] == ids[skip:]
        assert events_of(frames) == events_of(whole)[skip:]
