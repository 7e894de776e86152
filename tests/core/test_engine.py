"""The engine's hot path (``Engine._streams``) changes nothing but the cost.

A store whose engine never caches a stream takes the general path for every event; over
generated delta streams both stores give the same outcomes, issues and snapshots, and both agree
with the naive fold.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import AgentProtocolError, AgentStore, EventFactory, validate_event
from core.engine import Engine
from tests.core.naive import naive_fold
from tests.core.strategies import delta_streams

SETTINGS = settings(max_examples=150, deadline=None)


class _NoStreams(dict[str, Any]):
    """An ``Engine._streams`` that never keeps one: every event takes the general path."""

    def __setitem__(self, key: str, value: Any) -> None:
        pass


def general_store(mode: Any = "record") -> AgentStore:
    store = AgentStore(mode=mode)
    store._engine._streams = _NoStreams()
    return store


def hot_events(store: AgentStore) -> int:
    """How many delta types have a cached stream right now."""
    return len(store._engine._streams)


@SETTINGS
@given(delta_streams(), st.lists(st.integers(0, 80), max_size=5), st.booleans())
def test_hot_path_matches_the_general_path_and_the_fold(
    events: list[Any], read_points: list[int], validated: bool
) -> None:
    if validated:
        events = [event for event in events if validate_event(event) is None]
    hot, general = AgentStore(), general_store()
    points = set(read_points)
    for index, event in enumerate(events):
        assert hot.dispatch(event, validated=validated) == general.dispatch(
            event, validated=validated
        )
        assert hot.last_issue == general.last_issue
        if index in points:  # a snapshot mid-stream compacts the streamed text
            assert hot.get_snapshot() == general.get_snapshot() == naive_fold(events[: index + 1])
    assert hot.get_snapshot() == general.get_snapshot() == naive_fold(events)
    assert general._engine._streams == {}


@SETTINGS
@given(delta_streams(), st.lists(st.integers(1, 8), min_size=1, max_size=12))
def test_strict_batches_and_rollbacks_leave_no_stale_stream(
    events: list[Any], sizes: list[int]
) -> None:
    """Strict mode: batches that roll back, dispatches that raise, on both paths alike."""
    hot, general = AgentStore(mode="strict"), general_store("strict")
    start = 0
    for turn, size in enumerate(sizes * 4):
        chunk = events[start : start + size]
        start += size
        if not chunk:
            break
        for store in (hot, general):
            try:
                if turn % 2:
                    store.batch(chunk)
                else:
                    for event in chunk:
                        store.dispatch(event)
            except (AgentProtocolError, ValueError):
                pass
        assert hot.get_snapshot() == general.get_snapshot()
        assert hot.last_outcome == general.last_outcome


def _stream(deltas: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    factory = EventFactory("s", "r", now=lambda: 5.0)
    head = [
        factory.create("session.started", {}),
        factory.create("run.started", {}),
        factory.create("message.started", {"messageId": "m", "role": "assistant"}),
    ]
    body = [
        factory.create("message.delta", {"messageId": "m", "delta": f"{i},"}) for i in range(deltas)
    ]
    return head, body


def test_a_factory_stream_takes_the_hot_path_and_completion_ends_it() -> None:
    head, body = _stream(200)
    store = AgentStore()
    store.batch(head)
    store.dispatch(body[0], validated=True)
    assert hot_events(store) == 1  # the first delta caches the stream
    stream = store._engine._streams["message.delta"]
    for event in body[1:]:
        store.dispatch(event, validated=True)
    assert store._engine._streams["message.delta"] is stream  # every later one hit it
    assert store.get_entity("message", "r", "m")["content"] == "".join(  # type: ignore[index]
        f"{i}," for i in range(200)
    )
    done = EventFactory("s", "r", now=lambda: 6.0, initial_sequence=202).create(
        "message.completed", {"messageId": "m"}
    )
    store.dispatch(done)
    assert hot_events(store) == 0
    assert store.get_snapshot() == naive_fold([*head, *body, done])


def test_a_dropped_store_is_freed_by_reference_count_alone() -> None:
    """No reference cycle in a store that took every kind of handler: dropped, it is gone at
    once, not left for the collector (a capacity run drops one per history replay)."""
    head, body = _stream(20)
    tail = EventFactory("s", "r", now=lambda: 6.0, initial_sequence=len(head) + len(body))
    events = [
        *head,
        *body,
        tail.create("message.completed", {"messageId": "m"}),
        tail.create("tool.started", {"toolCallId": "t", "name": "x"}),
        tail.create("run.completed", {}),
    ]
    gc.collect()
    gc.disable()
    try:
        store = AgentStore()
        for event in events:
            store.dispatch(event)
        assert store.get_snapshot()["runs"]["r"]["status"] == "completed"
        assert not store.get_snapshot()["issues"]
        del store
        assert gc.collect() == 0
    finally:
        gc.enable()


@pytest.mark.parametrize("call", ["begin", "rollback", "load"])
def test_journal_and_load_drop_cached_streams(call: str) -> None:
    head, body = _stream(3)
    engine = Engine()
    for event in [*head, *body]:
        engine.apply(event)
    assert engine._streams
    if call == "load":
        engine.load(None)
    else:
        engine.begin()
        if call == "rollback":
            engine.rollback()
    assert not engine._streams
